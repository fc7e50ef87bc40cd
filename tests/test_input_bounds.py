"""Every list and map the API accepts has a bound (quests.limits, issue 24 finding 2): one item
over it is a 422 naming the field, and nothing is written. Within the bounds a request's cost is
linear in its size: creating a mission with many constraints costs the same statements as with
one. Operation receipts are never throttled, so their size and number per operation are bounded
instead (finding 7)."""

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext

from checkpoints.models import OperationEvent
from checkpoints.services import canonical_json, sha256_hex
from quests import limits
from quests.models import Mission
from quests.services import savestate
from tests.test_bad_input import STATE_MODELS

pytestmark = pytest.mark.django_db


def keys(n: int) -> dict:
    return {f"k{i}": i for i in range(n)}


def encoded() -> dict:
    return {"type": "json", "data": 1}


def graph_checkpoint(**fields) -> dict:
    return {"thread_id": "t-bounds", "checkpoint": {"id": "c1"}, **fields}


def graph_writes(**fields) -> dict:
    return {"thread_id": "t-bounds", "checkpoint_id": "c1", "task_id": "task", "writes": [], **fields}


# (path, a body one item over the bound, the field the 422 names)
OVER = {
    "constraints": ("missions", {"title": "t", "objective": "o", "constraints": ["c"] * (limits.MISSION_CONSTRAINTS_MAX + 1)}, "constraints"),
    "planned milestones": (
        "missions",
        {"title": "t", "objective": "o", "planned_milestones": [{"kind": "custom", "title": "m"}] * (limits.MISSION_PLANNED_MILESTONES_MAX + 1)},
        "planned_milestones",
    ),
    "agent state keys": ("runs/{run}/checkpoints", {"agent_state": keys(limits.OBJECT_KEYS_MAX + 1)}, "agent_state"),
    "approval payload keys": ("runs/{run}/approvals", {"action": "a", "reason": "r", "payload": keys(limits.OBJECT_KEYS_MAX + 1)}, "payload"),
    "approval agent state keys": (
        "runs/{run}/approvals",
        {"action": "a", "reason": "r", "payload": {}, "agent_state": keys(limits.OBJECT_KEYS_MAX + 1)},
        "agent_state",
    ),
    "batch items": (
        "runs/{run}/approvals/batch",
        {"items": [{"action": "a", "payload": {}, "reason": "r"}] * (limits.APPROVAL_BATCH_ITEMS_MAX + 1)},
        "items",
    ),
    "milestone evidence": ("runs/{run}/milestones", {"kind": "custom", "title": "m", "evidence": [1] * (limits.MILESTONE_EVIDENCE_MAX + 1)}, "evidence"),
    "record data keys": ("runs/{run}/records", {"kind": "note", "text": "x", "data": keys(limits.OBJECT_KEYS_MAX + 1)}, "data"),
    "operation request keys": (
        "runs/{run}/operations",
        {"key": "k", "kind": "e", "target": "t", "request": keys(limits.OBJECT_KEYS_MAX + 1)},
        "request",
    ),
    "receipt keys (observe)": ("operations/{op}/observe", {"external_status": "s", "receipt": keys(limits.OBJECT_KEYS_MAX + 1)}, "receipt"),
    "receipt keys (complete)": (
        "operations/{op}/complete",
        {"external_id": "x", "external_status": "s", "receipt": keys(limits.OBJECT_KEYS_MAX + 1)},
        "receipt",
    ),
    "graph channels": (
        "langgraph/checkpoints",
        graph_checkpoint(channels={f"ch{i}": {"version": "1", "value": encoded()} for i in range(limits.GRAPH_CHANNELS_MAX + 1)}),
        "channels",
    ),
    "graph metadata keys": ("langgraph/checkpoints", graph_checkpoint(metadata=keys(limits.OBJECT_KEYS_MAX + 1)), "metadata"),
    "graph checkpoint keys": ("langgraph/checkpoints", {"thread_id": "t", "checkpoint": {"id": "c1", **keys(limits.OBJECT_KEYS_MAX)}}, "checkpoint"),
    "graph writes": (
        "langgraph/writes",
        graph_writes(writes=[{"idx": i, "channel": "c", "value": encoded()} for i in range(limits.GRAPH_WRITES_MAX + 1)]),
        "writes",
    ),
    "graph interrupts": (
        "langgraph/writes",
        graph_writes(interrupts=[{"id": f"i{i}", "action": "a", "payload": {}, "reason": "r"} for i in range(limits.GRAPH_INTERRUPTS_MAX + 1)]),
        "interrupts",
    ),
    "graph run ids": ("langgraph/delete-for-runs", {"run_ids": ["r"] * (limits.GRAPH_RUN_IDS_MAX + 1)}, "run_ids"),
    "graph thread ids": ("langgraph/prune", {"thread_ids": ["t"] * (limits.GRAPH_THREAD_IDS_MAX + 1)}, "thread_ids"),
}


def counts() -> dict[str, int]:
    return {name: apps.get_model(name).objects.count() for name in [*STATE_MODELS, "quests.AuditEvent", "quests.OperationEvent"]}


@pytest.fixture
def op(agent, run) -> dict:
    response = agent.post(f"runs/{run['id']}/operations", {"key": "send", "kind": "email", "target": "t", "request": {}})
    assert response.status_code == 201, response.content
    return response.json()


@pytest.mark.parametrize("case", list(OVER))
def test_one_item_over_a_bound_is_a_422_naming_it_and_nothing_is_written(agent, run, op, settings, case):
    path, body, field = OVER[case]
    before = counts()
    response = agent.post(path.format(run=run["id"], op=op["id"]), body)
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid" and error["field"] == field
    assert "at most" in error["message"]
    assert counts() == before


def test_every_over_bound_body_still_fits_the_body_limit(settings):
    """So a list one item too long is refused by name (422), not as a 413."""
    import json

    for path, body, _ in OVER.values():
        assert len(json.dumps(body).encode()) < settings.QUESTLOG_MAX_BODY_BYTES, path


def test_the_bounds_are_in_the_openapi_document(client):
    schemas = client.get("/api/v1/openapi.json").json()["components"]["schemas"]
    assert schemas["MissionIn"]["properties"]["constraints"]["anyOf"][0]["maxItems"] == limits.MISSION_CONSTRAINTS_MAX
    assert schemas["CheckpointIn"]["properties"]["agent_state"]["maxProperties"] == limits.OBJECT_KEYS_MAX
    assert schemas["ApprovalBatchIn"]["properties"]["items"]["maxItems"] == limits.APPROVAL_BATCH_ITEMS_MAX
    assert schemas["GraphCheckpointIn"]["properties"]["channels"]["maxProperties"] == limits.GRAPH_CHANNELS_MAX


def test_a_request_at_the_bounds_is_accepted(agent, run):
    created = agent.post("missions", {"title": "t", "objective": "o", "constraints": [f"c{i}" for i in range(limits.MISSION_CONSTRAINTS_MAX)]})
    assert created.status_code == 201, created.content
    assert Mission.objects.get(pk=created.json()["id"]).constraints.count() == limits.MISSION_CONSTRAINTS_MAX
    checkpoint = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": keys(limits.OBJECT_KEYS_MAX)})
    assert checkpoint.status_code == 201, checkpoint.content


# --- Constraints: a cost linear in their number -----------------------------------------------------


def statements_to_create(agent, constraints: int) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = agent.post("missions", {"title": "t", "objective": "o", "constraints": [f"rule {i}" for i in range(constraints)]})
    assert response.status_code == 201, response.content
    return len(queries)


def test_creating_a_mission_costs_the_same_statements_whatever_its_number_of_constraints(agent):
    """Each constraint used to refresh (read and rewrite) the whole save state: 1,000 took 4,006
    statements. Now they go in one insert, their audit events in another, the state once."""
    statements_to_create(agent, 1)  # the token's first use is not what is measured
    assert statements_to_create(agent, 1) == statements_to_create(agent, 10) == statements_to_create(agent, limits.MISSION_CONSTRAINTS_MAX)


def statements_to_ask(agent, questions: int) -> int:
    mission = agent.post("missions", {"title": "t", "objective": "o"}).json()
    run = agent.post(f"missions/{mission['id']}/runs", {}).json()["run"]
    items = [{"action": f"pay invoice {i}", "payload": {"n": i}, "reason": "r", "agent_ref": f"call-{i}"} for i in range(questions)]
    with CaptureQueriesContext(connection) as queries:
        response = agent.post(f"runs/{run['id']}/approvals/batch", {"items": items})
    assert response.status_code == 201, response.content
    assert [a["agent_ref"] for a in response.json()["items"]] == [f"call-{i}" for i in range(questions)]
    return len(queries)


def test_asking_a_batch_of_approvals_costs_the_same_statements_whatever_its_size(agent):
    statements_to_ask(agent, 1)
    assert statements_to_ask(agent, 1) == statements_to_ask(agent, 10) == statements_to_ask(agent, limits.APPROVAL_BATCH_ITEMS_MAX)


def test_constraints_created_together_are_in_the_save_state_in_order_and_audited(agent):
    response = agent.post("missions", {"title": "t", "objective": "o", "constraints": ["first", "second", "third"]})
    mission = Mission.objects.get(pk=response.json()["id"])
    refs, contents = savestate.current_document(mission)
    rebuilt = savestate.state_document(mission)["constraints"]
    assert [c["text"] for c in rebuilt] == ["first", "second", "third"]
    assert refs["constraints"] == sha256_hex(canonical_json(rebuilt))
    added = mission.audit_events.filter(entity="constraint", action="add").order_by("entity_id")
    assert [(e.entity_id, e.data["text"]) for e in added] == [(c["id"], c["text"]) for c in rebuilt]


# --- Receipts: exempt from the rate, bounded in size and number ------------------------------------


def receipt_of(size: int) -> dict:
    """A receipt whose canonical JSON is exactly `size` bytes."""
    empty = len(canonical_json({"body": ""}))
    return {"body": "x" * (size - empty)}


@pytest.mark.parametrize("call", ["complete", "observe"])
def test_a_receipt_over_its_size_is_refused_by_name_and_nothing_is_written(agent, op, call):
    body = {"external_id": "x", "external_status": "sent"} if call == "complete" else {"external_status": "sent"}
    before = counts()
    too_big = agent.post(f"operations/{op['id']}/{call}", {**body, "receipt": receipt_of(limits.RECEIPT_BYTES_MAX + 1)})
    assert too_big.status_code == 422, too_big.content
    error = too_big.json()["error"]
    assert error["field"] == "receipt" and error["limit"] == limits.RECEIPT_BYTES_MAX
    assert counts() == before
    at_limit = agent.post(f"operations/{op['id']}/{call}", {**body, "receipt": receipt_of(limits.RECEIPT_BYTES_MAX)})
    assert at_limit.status_code == 200, at_limit.content


def test_an_operation_keeps_a_bounded_number_of_receipts_plus_one_per_attempt(agent, op, settings):
    settings.QUESTLOG_API_RATE = 5  # receipts are never refused by the rate: the bound is their own
    observe = f"operations/{op['id']}/observe"
    for i in range(limits.RECEIPTS_PER_OPERATION_MAX):
        assert agent.post(observe, {"external_status": f"s{i}", "receipt": {"n": i}}).status_code == 200
    before = counts()
    refused = agent.post(observe, {"external_status": "one too many"})
    assert refused.status_code == 422, refused.content
    assert refused.json()["error"]["field"] == "receipt" and refused.json()["error"]["limit"] == limits.RECEIPTS_PER_OPERATION_MAX
    refused_failure = agent.post(f"operations/{op['id']}/fail", {"error": "timeout", "retryable": True})
    assert refused_failure.status_code == 422
    assert counts() == before
    # An attempt makes room for its own receipt (attempts are rate-limited, receipts are not).
    settings.QUESTLOG_API_RATE = 0
    assert agent.post(f"operations/{op['id']}/attempt").status_code == 200
    completed = agent.post(f"operations/{op['id']}/complete", {"external_id": "m-1", "external_status": "sent"})
    assert completed.status_code == 200, completed.content
    assert OperationEvent.objects.filter(operation_id=op["id"], event__in=["completed", "failed", "observed"]).count() == limits.RECEIPTS_PER_OPERATION_MAX + 1
    # The same receipt again is still the no-op it always was.
    assert agent.post(f"operations/{op['id']}/complete", {"external_id": "m-1", "external_status": "sent"}).status_code == 200


def test_docs_name_every_bound_on_lists_and_maps_with_its_value():
    """docs/api.md's "Input bounds" table has a row for every count in quests.limits' "Lists and
    maps" section, with the constant's name and its value."""
    import inspect
    import re
    from pathlib import Path

    source = inspect.getsource(limits)
    section = source.split("# --- Lists and maps")[1].split("# --- ")[0]
    names = re.findall(r"^([A-Z_]+) = ", section, re.MULTILINE)
    assert len(names) >= 12, names  # guards the parsing
    docs = Path(__file__).resolve().parent.parent.joinpath("docs", "api.md").read_text()
    bounds = docs.split("## Input bounds")[1].split("\n## ")[0]
    for name in names:
        rows = [line for line in bounds.splitlines() if f"`{name}`" in line]
        value = getattr(limits, name)
        assert rows, f"{name} is not in docs/api.md's Input bounds"
        assert f"{value:,}" in rows[0] or f" {value} " in rows[0], (name, value, rows[0])
