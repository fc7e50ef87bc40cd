"""POST /runs/{id}/records: durable records, resolution, archived tool output, body limits."""

import json

import pytest
from django.test import override_settings

from checkpoints.models import Blob, Record

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
