"""POST /runs/{id}/records: durable records, resolution, archived tool output, body limits."""

import json

import pytest
from django.test import override_settings

from checkpoints.models import Blob, Record
from tests.test_engine import counted_on_postgresql
from tests.test_throttle_count import cache_statements, counted_rate, database_cache  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db

RECORD_FIELDS = {"id", "kind", "text", "data", "resolved", "created_at"}


def record(agent, run: dict, kind: str, text: str, **extra):
    response = agent.post(f"runs/{run['id']}/records", {"kind": kind, "text": text, **extra})
    assert response.status_code in (200, 201), response.content
    return response.json()


def test_it_creates_a_record_with_every_contract_field(agent, run):
    response = agent.post(f"runs/{run['id']}/records", {"kind": "decision", "text": "Use Lakeside", "data": {"cost": 4200}})
    assert response.status_code == 201
    body = response.json()
    assert RECORD_FIELDS <= set(body)
    assert (body["kind"], body["text"], body["data"], body["resolved"]) == ("decision", "Use Lakeside", {"cost": 4200}, False)


def test_it_refuses_an_unknown_kind(agent, run):
    response = agent.post(f"runs/{run['id']}/records", {"kind": "rumour", "text": "x"})
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "kind"


def test_it_refuses_data_that_is_not_an_object(agent, run):
    response = agent.post(f"runs/{run['id']}/records", {"kind": "note", "text": "x", "data": [1, 2]})
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "data"


@pytest.mark.parametrize(
    "kind, section",
    [("decision", "decisions"), ("open_question", "open_questions"), ("blocker", "blockers"), ("dependency", "dependencies")],
)
def test_durable_records_are_in_the_bundle_until_resolved(agent, mission, run, kind, section):
    made = record(agent, run, kind, "Something that matters")
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert [r["id"] for r in bundle[section]] == [made["id"]]
    resolution = record(agent, run, "decision", "Settled it", resolves=made["id"])
    assert Record.objects.get(pk=made["id"]).resolved is True
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert made["id"] not in [r["id"] for r in bundle[section]]
    assert resolution["id"] in [r["id"] for r in bundle["decisions"]]


def test_resolves_must_name_a_record_of_the_same_mission(agent, bob_agent, run):
    bob_mission = bob_agent.post("missions", {"title": "B", "objective": "O"}).json()
    bob_run = bob_agent.post(f"missions/{bob_mission['id']}/runs").json()["run"]
    theirs = record(bob_agent, bob_run, "open_question", "Bob's question")
    response = agent.post(f"runs/{run['id']}/records", {"kind": "decision", "text": "x", "resolves": theirs["id"]})
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "resolves"
    assert Record.objects.get(pk=theirs["id"]).resolved is False


def test_notes_and_evidence_stay_out_of_the_durable_lists(agent, mission, run):
    record(agent, run, "note", "Looked at three venues")
    record(agent, run, "evidence", "Quote from Lakeside")
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    for section in ("decisions", "open_questions", "blockers", "dependencies"):
        assert bundle[section] == []


def test_a_record_key_replays_and_refuses_reuse(agent, run):
    first = agent.post(f"runs/{run['id']}/records", {"kind": "decision", "text": "A", "key": "r1"})
    again = agent.post(f"runs/{run['id']}/records", {"kind": "decision", "text": "A", "key": "r1"})
    other = agent.post(f"runs/{run['id']}/records", {"kind": "decision", "text": "B", "key": "r1"})
    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 409)
    assert again.json()["id"] == first.json()["id"]
    assert other.json()["error"]["code"] == "key_reuse"
    assert Record.objects.count() == 1


def test_tool_output_is_archived_as_a_blob_with_a_preview(agent, mission, run, settings):
    raw = "line of raw tool output\n" * 500
    made = record(agent, run, "tool_output", raw)
    stored = Record.objects.get(pk=made["id"])
    assert stored.blob_id is not None
    assert bytes(Blob.objects.get(pk=stored.blob_id).data).decode() == raw
    assert len(stored.text) <= settings.QUESTLOG_PREVIEW_CHARS
    assert raw.startswith(stored.text.rstrip("…"))
    assert made["text"] == stored.text
    assert made["size_bytes"] == len(raw.encode())
    checkpoint = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {}}).json()
    state = agent.get(f"checkpoints/{checkpoint['id']}").json()["state"]
    assert raw not in json.dumps(state)
    assert [t["blob"] for t in state["tool_outputs"]] == [stored.blob_id]


def test_the_same_tool_output_twice_is_stored_once(agent, run):
    raw = "x" * 5000
    record(agent, run, "tool_output", raw)
    record(agent, run, "tool_output", raw)
    assert Blob.objects.filter(media_type="text/plain").count() == 1


@override_settings(QUESTLOG_MAX_BODY_BYTES=2000, QUESTLOG_MAX_TOOL_OUTPUT_BYTES=20000)
def test_tool_output_may_use_the_larger_body_limit_but_other_kinds_may_not(agent, run):
    big = "y" * 5000
    assert agent.post(f"runs/{run['id']}/records", {"kind": "tool_output", "text": big}).status_code == 201
    response = agent.post(f"runs/{run['id']}/records", {"kind": "note", "text": big})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    response = agent.post(f"runs/{run['id']}/records", {"kind": "tool_output", "text": "z" * 25000})
    assert response.status_code == 413
    assert Record.objects.count() == 1


def test_the_default_limits_are_one_and_ten_mebibytes(agent, run):
    over_one = "q" * (1024 * 1024 + 10)
    assert agent.post(f"runs/{run['id']}/records", {"kind": "decision", "text": over_one}).status_code == 413
    assert agent.post(f"runs/{run['id']}/records", {"kind": "tool_output", "text": over_one}).status_code == 201
    over_ten = "q" * (10 * 1024 * 1024 + 10)
    assert agent.post(f"runs/{run['id']}/records", {"kind": "tool_output", "text": over_ten}).status_code == 413


# --- Authenticated by the lock's own statement (issue 20) -----------------------------------------
# An agent token's record is authenticated and counted by the statement that locks its run: no
# round trip of its own. A token that is not valid, a run it may not see, a request past the rate:
# refused, and nothing is written.


def _records(run: dict) -> int:
    return Record.objects.filter(run_id=run["id"]).count()


@counted_on_postgresql
def test_a_token_is_authenticated_by_the_statement_that_locks_the_run(agent, run):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        record(agent, run, "note", "Called the venue", key="auth-1")
    statements = [q["sql"] for q in captured.captured_queries]
    locks = [sql for sql in statements if "quests_agenttoken" in sql]
    assert len(locks) == 1 and "quests_run" in locks[0]  # one statement authenticates and locks


def test_a_revoked_token_is_401_and_nothing_is_written(agent, run):
    from django.utils import timezone

    from quests.models import AgentToken

    before = _records(run)
    AgentToken.objects.update(revoked_at=timezone.now())
    response = agent.post(f"runs/{run['id']}/records", {"kind": "decision", "text": "Use Lakeside"})
    assert response.status_code == 401 and response.json()["error"]["code"] == "unauthenticated"
    assert _records(run) == before


def test_a_token_of_another_mission_or_person_finds_no_run(agent, alice, bob_agent, run):
    from django.test import Client

    from quests.models import Mission
    from quests.services.tokens import token_create
    from tests.conftest import ApiClient

    other = agent.post("missions", {"title": "Other", "objective": "Elsewhere"}).json()
    _, raw = token_create(user=alice, name="limited", mission=Mission.objects.get(pk=other["id"]))
    limited = ApiClient(Client(), raw)
    before = _records(run)
    for caller in (limited, bob_agent):
        response = caller.post(f"runs/{run['id']}/records", {"kind": "decision", "text": "Use Lakeside"})
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert _records(run) == before


def test_an_invalid_body_with_a_token_that_is_not_valid_is_401(client, run):
    response = client.post(f"/api/v1/runs/{run['id']}/records", {"kind": "rumour"}, content_type="application/json", HTTP_AUTHORIZATION="Bearer qlt_made_up")
    assert response.status_code == 401


@pytest.mark.django_db(transaction=True)
def test_the_lock_counts_the_request_and_past_the_rate_nothing_is_written(agent, run, counted_rate):  # noqa: F811
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for step in range(counted_rate):
        with CaptureQueriesContext(connection) as captured:
            record(agent, run, "note", f"step {step}")
        (statement,) = cache_statements(captured)
        assert "quests_agenttoken" in statement and "quests_run" in statement
    before = _records(run)
    refused = agent.post(f"runs/{run['id']}/records", {"kind": "note", "text": "one too many"})
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert _records(run) == before


def test_a_heartbeat_authenticates_its_token_in_its_one_statement(agent, alice, bob_agent, run):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from quests.models import AgentToken, Run

    with CaptureQueriesContext(connection) as captured:
        assert agent.post(f"runs/{run['id']}/heartbeat").status_code == 200
    assert sum("quests_agenttoken" in q["sql"] for q in captured.captured_queries) == 1
    beat = Run.objects.get(pk=run["id"]).heartbeat_at
    assert bob_agent.post(f"runs/{run['id']}/heartbeat").status_code == 404  # another person's run
    AgentToken.objects.filter(user=alice).update(revoked_at=timezone.now())
    refused = agent.post(f"runs/{run['id']}/heartbeat")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthenticated"
    assert Run.objects.get(pk=run["id"]).heartbeat_at == beat  # neither beat it
