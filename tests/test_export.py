"""/account/export/: all of a person's data as JSON, and nothing of anyone else's."""

import json

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from checkpoints.models import Checkpoint
from checkpoints.services import checkpoint_write
from quests.models import Approval, MemoryProposal, Mission
from tests.test_retention_purge import finished_mission

pytestmark = pytest.mark.django_db


def export_text(user) -> str:
    client = Client()
    client.force_login(user)
    r = client.get("/account/export/")
    assert r.status_code == 200
    assert r.streaming, "written as it is read, never held whole"
    assert r["Content-Type"] == "application/json"
    assert r["Content-Disposition"].startswith('attachment; filename="questlog-')
    return b"".join(r.streaming_content).decode()


def export(user) -> tuple[dict, str]:
    text = export_text(user)
    return json.loads(text), text


def test_the_export_is_never_stored_by_a_cache(alice):
    """Issue 24, finding 5: an answer that may carry secrets (agents' states) says no-store."""
    client = Client()
    client.force_login(alice)
    directives = {part.strip() for part in client.get("/account/export/")["Cache-Control"].split(",")}
    assert {"no-store", "private"} <= directives


def test_it_needs_a_signed_in_person():
    r = Client().get("/account/export/")
    assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")


def test_export_contains_everything_of_the_person(alice, agent, person):
    m = finished_mission(agent, person, "Offsite", secret="alice-secret")
    proposal = MemoryProposal.objects.get(mission_id=m["id"])
    person.post(f"memory-proposals/{proposal.pk}/decision", {"decision": "approve"})
    data, _ = export(alice)

    assert data["user"]["username"] == "alice"
    [mission] = data["missions"]
    assert mission["id"] == m["id"] and mission["title"] == "Offsite" and mission["objective"] == "Objective alice-secret"
    assert mission["lifecycle"]["retention_class"] == "working" and mission["lifecycle"]["expires_at"] is not None
    assert [r["number"] for r in mission["runs"]] == [1, 2]
    assert [c["text"] for c in mission["constraints"]] == ["Constraint alice-secret"]

    db_checkpoints = list(Mission.objects.get(pk=m["id"]).checkpoints.order_by("seq").values_list("pk", flat=True))
    assert [c["id"] for c in mission["checkpoints"]] == db_checkpoints
    agent_states = [c["agent_state"] for c in mission["checkpoints"]]
    assert {"shared": "shared-output" * 20, "own": "Offsite alice-secret"} in agent_states
    head = next(c for c in mission["checkpoints"] if c["id"] == m["head_checkpoint_id"])
    assert head["state"]["decisions"][0]["text"] == "Decision alice-secret"
    assert head["lifecycle"]["retention_class"] == "working" and "expires_at" in head["lifecycle"]

    kinds = sorted(r["kind"] for r in mission["records"])
    assert kinds == ["decision", "tool_output", "tool_output"]
    raw = [r["raw_text"] for r in mission["records"] if r["kind"] == "tool_output"]
    assert any(text.startswith("only Offsite alice-secret") for text in raw), "archived raw output is exported whole"

    [op] = mission["ledger"]
    assert op["key"] == "email-1" and op["request"] == {"body": "alice-secret"} and op["receipt"] == {"r": "alice-secret"}
    assert [e["event"] for e in op["events"]] == ["planned", "attempted", "completed"]
    [approval] = mission["approvals"]
    assert approval["payload"] == {"card": "alice-secret"} and approval["status"] == "approved"
    [milestone] = mission["milestones"]
    assert milestone["summary"] == "Summary alice-secret"
    assert any(e["action"] == "complete" for e in mission["activity"])

    [item] = data["memory"]["items"]
    assert item["name"] == "pref-Offsite" and item["value"] == "alice-secret" and item["source_mission_id"] == m["id"]
    assert item["lifecycle"]["retention_class"] == "long_term"
    assert [p["status"] for p in data["memory"]["proposals"]] == ["approved"]
    assert [t["name"] for t in data["agent_tokens"]] == ["test-agent"]
    assert all("token_hash" not in t for t in data["agent_tokens"])


def test_export_contains_nothing_of_other_users(alice, bob, agent, person, bob_agent, bob_person):
    finished_mission(agent, person, "Alice quest", secret="alice-secret")
    bobs = finished_mission(bob_agent, bob_person, "Bob quest", secret="bob-secret")
    data, text = export(alice)
    assert "bob-secret" not in text and "Bob quest" not in text and "bob-agent" not in text
    assert bobs["id"] not in [m["id"] for m in data["missions"]]

    bob_data, bob_text = export(bob)
    assert "alice-secret" not in bob_text and "Alice quest" not in bob_text
    assert [m["title"] for m in bob_data["missions"]] == ["Bob quest"]


def test_a_purged_missions_export_is_its_tombstone(alice, agent, person):
    from quests.retention.services.purge import retention_delete_now
    from quests.services.audit import Actor

    m = finished_mission(agent, person, "Offsite", secret="alice-secret")
    retention_delete_now(actor=Actor(user=alice), mission_id=m["id"])
    data, text = export(alice)
    [mission] = data["missions"]
    assert mission["title"] == "Offsite" and mission["purged_at"] is not None
    assert mission["checkpoints"] == [] and mission["records"] == [] and mission["approvals"] == []
    assert "alice-secret" not in text
    json.dumps(data)


# ---- stored data of any depth ------------------------------------------------------------------


def nested_text(levels: int, leaf: str) -> str:
    return '{"a": ' * levels + json.dumps(leaf) + "}" * levels


def test_an_agent_state_stored_nested_985_levels_deep_still_exports(alice, agent, run):
    """Issue 24, finding 3: stored before the depth limit, such a state made the export fail for
    as long as it existed (the indented encoder recursed per level)."""
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"plan": "before"}})
    stored = Checkpoint.objects.filter(run_id=run["id"]).latest("seq")
    deep = json.loads(nested_text(985, "the bottom"))
    checkpoint_write(
        mission_id=stored.mission_id,
        run_id=run["id"],
        parent=stored,
        seq=stored.seq + 1,
        trigger="agent",
        agent_state={"deep": deep},
    )
    data, _ = export(alice)
    [mission] = data["missions"]
    assert mission["checkpoints"][-1]["agent_state"] == {"deep": deep}
    assert {"plan": "before"} in [c["agent_state"] for c in mission["checkpoints"]]


def test_values_stored_deeper_than_any_reader_follows_still_export(alice, agent, run):
    """1,400 levels: stored by the API before the limit (json.loads follows about 1,500), past
    what the export's own wrapping lets Python's json.loads read back. The export still writes
    them, whole: checked on the text, since no recursive parser could."""
    levels = 1400
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"plan": "before"}})
    approval = agent.post(f"runs/{run['id']}/approvals", {"action": "a", "payload": {}, "reason": "r"}).json()
    stored = Checkpoint.objects.filter(run_id=run["id"]).latest("seq")
    checkpoint_write(
        mission_id=stored.mission_id,
        run_id=run["id"],
        parent=stored,
        seq=stored.seq + 1,
        trigger="agent",
        agent_state={"deep": json.loads(nested_text(levels, "state bottom"))},
    )
    Approval.objects.filter(pk=approval["id"]).update(payload=json.loads(nested_text(levels, "payload bottom")))
    compact = "".join(export_text(alice).split())
    assert '"deep":' + nested_text(levels, "statebottom").replace(" ", "") in compact
    assert '"payload":' + nested_text(levels, "payloadbottom").replace(" ", "") in compact


def test_the_export_reads_each_part_when_it_writes_it(alice, agent, person, monkeypatch):
    """Streamed, not built whole first: a mission's rows are read when the writer reaches that
    mission, a chunk of rows at a time."""
    from quests import jsonstream
    from quests.retention.services import export as export_service

    made = [finished_mission(agent, person, f"Quest {n}", secret=f"secret-{n}") for n in range(3)]
    monkeypatch.setattr(jsonstream, "CHUNK_CHARACTERS", 1)
    monkeypatch.setattr(export_service, "EXPORT_ROWS", 2)
    client = Client()
    client.force_login(alice)
    r = client.get("/account/export/")
    text = ""
    with CaptureQueriesContext(connection) as queries:
        for chunk in r.streaming_content:
            text += chunk.decode()
            if '"title": "Quest 1"' in text:
                break
        read_by_then = [q["sql"] for q in queries.captured_queries]
        text += b"".join(r.streaming_content).decode()
    last = f'"mission_id" = {made[2]["id"]}'
    assert not any(last in sql for sql in read_by_then), "the last mission's history is not read before it is written"
    assert any(last in q["sql"] for q in queries.captured_queries)
    assert [m["title"] for m in json.loads(text)["missions"]] == ["Quest 0", "Quest 1", "Quest 2"]
    assert len(json.loads(text)["missions"][2]["checkpoints"]) == len(Checkpoint.objects.filter(mission_id=made[2]["id"]))
