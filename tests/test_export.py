"""/account/export/: all of a person's data as JSON, and nothing of anyone else's."""

import json

import pytest
from django.test import Client

from quests.models import MemoryProposal, Mission
from tests.test_retention_purge import finished_mission

pytestmark = pytest.mark.django_db


def export(user) -> tuple[dict, str]:
    client = Client()
    client.force_login(user)
    r = client.get("/account/export/")
    assert r.status_code == 200
    assert r["Content-Type"] == "application/json"
    assert r["Content-Disposition"].startswith('attachment; filename="questlog-')
    return r.json(), r.content.decode()


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
    from quests.services.audit import Actor
    from quests.retention.services.purge import retention_delete_now

    m = finished_mission(agent, person, "Offsite", secret="alice-secret")
    retention_delete_now(actor=Actor(user=alice), mission_id=m["id"])
    data, text = export(alice)
    [mission] = data["missions"]
    assert mission["title"] == "Offsite" and mission["purged_at"] is not None
    assert mission["checkpoints"] == [] and mission["records"] == [] and mission["approvals"] == []
    assert "alice-secret" not in text
    json.dumps(data)
