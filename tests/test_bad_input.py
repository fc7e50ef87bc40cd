"""Bad input everywhere: every POST of the API, agent's and people's, answers a 4xx JSON error for
bodies that are deeply nested, huge, not UTF-8, repeat a key, hold NUL characters, numbers out of
range or datetimes without a time zone — never a 5xx — and nothing is written."""

import json

import pytest
from django.apps import apps

from tests.test_api_errors import ALL_POSTS, world  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db

LANGGRAPH_POSTS = [
    "langgraph/checkpoints",
    "langgraph/writes",
    "langgraph/session",
    "langgraph/threads/delete",
    "langgraph/delete-for-runs",
    "langgraph/copy",
    "langgraph/prune",
]
POSTS = [*ALL_POSTS, "runs/{run}/approvals/batch", *LANGGRAPH_POSTS]
STATE_MODELS = [
    "quests.Mission",
    "quests.Run",
    "quests.Constraint",
    "quests.Approval",
    "quests.Milestone",
    "quests.MemoryProposal",
    "quests.GraphThread",
    "quests.Checkpoint",
    "quests.Record",
    "quests.Operation",
    "quests.Blob",
    "quests.GraphCheckpoint",
    "quests.GraphWrite",
]


def deep(levels: int) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


RAW_BODIES = {
    "nested 10,000 levels": '{"agent_state": ' + deep(10_000) + ', "title": "x", "objective": "y"}',
    "nested array 10,000 levels": '{"payload": ' + "[" * 10_000 + "]" * 10_000 + "}",
    "huge array": json.dumps({"agent_state": {"k": list(range(100_000))}, "evidence": list(range(100_000)), "items": [1] * 100_000}),
    "invalid UTF-8": b'{"title": "\xff\xfe", "objective": "\xc3\x28"}',
    "duplicate keys": '{"title": "x", "title": 5, "objective": "y", "objective": []}',
    "NUL in a key": '{"title\\u0000": "x", "objective": "y"}',
    "NUL in a value": '{"title": "x\\u0000", "objective": "y", "text": "a\\u0000", "thread_id": "t\\u0000"}',
    "lone surrogate": '{"title": "\\ud800", "objective": "y", "thread_id": "\\udfff"}',
    "negative integers": '{"max_attempts": -1, "idx": -99999999999, "limit": -5, "evidence": [-1], "checkpoint_id": -7, "mission_id": -3}',
    "huge integers": '{"max_attempts": 99999999999999999999999, "idx": 1e30, "mission_id": 340282366920938463463374607431768211456, "checkpoint_id": 99999999999999999999}',
    "datetime without a time zone": '{"expires_at": "2030-01-01T09:00:00", "retry_at": "2030-01-01 09:00", "reason": "blocked_external"}',
}


def state_counts() -> dict[str, int]:
    return {label: apps.get_model(label).objects.count() for label in STATE_MODELS}


@pytest.mark.parametrize("name", list(RAW_BODIES))
def test_bad_bodies_are_4xx_json_and_write_nothing(agent, person, world, name):
    raw = RAW_BODIES[name]
    before = state_counts()
    for path in POSTS:
        for api in (agent, person):
            response = api.post(path.format_map(world), raw=raw)
            assert 400 <= response.status_code < 500, (name, path, response.status_code, response.content[:300])
            assert response.json()["error"]["message"], (name, path)
    assert state_counts() == before, name


def test_another_users_ids_are_not_found_and_write_nothing(bob_agent, world):
    before = state_counts()
    bodies = {
        "missions/{mission}/constraints": {"text": "Not yours"},
        "missions/{mission}/runs": {},
        "runs/{run}/checkpoints": {"agent_state": {}},
        "runs/{run}/records": {"kind": "note", "text": "x"},
        "runs/{run}/approvals/batch": {"items": [{"action": "a", "payload": {}, "reason": "r"}]},
        "operations/{op}/complete": {"external_id": "x", "external_status": "sent"},
        "langgraph/session": {"thread_id": "t", "mission_id": world["mission"]},
    }
    for path, body in bodies.items():
        response = bob_agent.post(path.format_map(world), body)
        assert response.status_code == 404, (path, response.status_code, response.content[:300])
    assert state_counts() == before


def test_unknown_fields_are_ignored_and_never_stored(agent, world):
    # The contract (docs/api.md): fields a body does not name are ignored, their text held to the
    # same rules as the rest.
    response = agent.post("missions", {"title": "Plan", "objective": "Offsite", "surprise": {"deep": [1, 2, 3]}})
    assert response.status_code == 201
    assert "surprise" not in response.json()
    refused = agent.post("missions", raw='{"title": "Plan", "objective": "Offsite", "surprise": "\\u0000"}')
    assert refused.status_code == 422


def test_a_body_nesting_too_deeply_or_repeating_a_key_is_refused_saying_so(agent):
    too_deep = agent.post("missions", raw=RAW_BODIES["nested 10,000 levels"])
    assert too_deep.status_code == 400 and too_deep.json()["error"]["message"] == "The request body nests too deeply."
    repeated = agent.post("missions", raw='{"title": "Plan", "objective": "Offsite", "title": "Other"}')
    assert repeated.status_code == 400
    assert repeated.json()["error"] == {"code": "malformed_json", "message": "The request body repeats the key 'title'.", "field": "title"}
    assert agent.post("missions", raw='{"title": "Plan", "objective": "Offsite", "data": {"a": 1}, "more": {"a": 2}}').status_code == 201
