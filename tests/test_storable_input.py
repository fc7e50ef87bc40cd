"""One rule for every text and JSON value a client sends (quests.storable): no NUL character or
lone surrogate in any string or key, no NaN, Infinity or number out of a double's range, and no
JSON value nesting deeper than JSON_DEPTH_MAX. The API's bodies, the LangGraph `filter`, the
"Edit and approve" form and the pages' search boxes all answer a 4xx (a JSON error or a form
error) and change nothing; never a 500."""

import json
from pathlib import Path
from urllib.parse import quote

import pytest

from quests import storable
from quests.limits import JSON_DEPTH_MAX
from quests.models import Approval
from tests.builders import fast_password_hashing, new_mission, waiting_on_approval  # noqa: F401

pytestmark = pytest.mark.django_db


def nested(depth: int, leaf=1):
    """A JSON value of exactly `depth` levels: objects and arrays taking turns."""
    value = leaf
    for level in range(depth):
        value = {"a": value} if level % 2 else [value]
    return value


def nested_text(depth: int) -> str:
    # Built as text: the deepest values are past what json.dumps would write.
    return '{"a": ' * depth + "1" + "}" * depth


# ---- the rule itself ---------------------------------------------------------------------------

NOT_STORABLE = {
    "NUL in a value": '{"a": "x\\u0000y"}',
    "NUL in a key": '{"a\\u0000": 1}',
    "lone surrogate in a value": '{"a": ["\\ud800"]}',
    "lone surrogate in a key": '{"\\udfff": 1}',
    "NaN": '{"a": NaN}',
    "Infinity": '{"a": [Infinity]}',
    "-Infinity": '{"a": -Infinity}',
    "a float past a double": '{"a": 1e999}',
    "an integer past a double": '{"a": 1' + "0" * 400 + "}",
    "an integer of more digits than Python reads": '{"a": ' + "9" * 5000 + "}",
    "a repeated key": '{"a": 1, "a": 2}',
    "one level too deep": nested_text(JSON_DEPTH_MAX + 1),
    "far too deep to parse": nested_text(100_000),
    "not JSON": '{"a": ',
}


@pytest.mark.parametrize("name", list(NOT_STORABLE))
def test_the_rule_refuses_what_postgresql_or_a_reader_cannot_keep(name):
    with pytest.raises(storable.Unstorable) as refused:
        storable.json_value(NOT_STORABLE[name])
    assert refused.value.message


def test_the_rule_keeps_what_it_can_store_exactly():
    text = json.dumps({"n": 1e300, "m": 123456789012345678901234567890, "tiny": 5e-324, "s": "é\u2028😀", "deep": nested(JSON_DEPTH_MAX - 1)})
    assert storable.json_value(text) == json.loads(text)
    assert storable.check_json(nested(JSON_DEPTH_MAX)) == nested(JSON_DEPTH_MAX)
    with pytest.raises(storable.Unstorable, match=f"deeper than {JSON_DEPTH_MAX} levels"):
        storable.check_json(nested(JSON_DEPTH_MAX + 1))


def test_depth_counts_objects_and_arrays_and_names_where_the_value_is_too_deep():
    assert storable.check_json(1, max_depth=0) == 1
    assert storable.check_json({}, max_depth=1) == {} and storable.check_json({"a": [1]}, max_depth=2) == {"a": [1]}
    for too_deep, limit in (({}, 0), ([[]], 1), ({"a": [1]}, 1)):
        with pytest.raises(storable.Unstorable):
            storable.check_json(too_deep, max_depth=limit)
    with pytest.raises(storable.Unstorable):
        storable.check_json(nested(100_000))  # walked with a stack of its own: no RecursionError
    with pytest.raises(storable.Unstorable) as refused:
        storable.check_json({"ok": 1, "state": nested(JSON_DEPTH_MAX)})
    assert refused.value.path.startswith("state.a.0.a.0")


def test_a_depth_check_alone_judges_depth_as_the_whole_rule_does():
    # check_depth walks containers only, for values whose text and numbers were held already.
    for value, limit in ((nested(JSON_DEPTH_MAX), JSON_DEPTH_MAX), ({"a": [1]}, 2), ({}, 1), ([], 1)):
        assert storable.check_depth(value, max_depth=limit) is value
    for value, limit in ((nested(JSON_DEPTH_MAX + 1), JSON_DEPTH_MAX), ({"a": [1]}, 1), ({}, 0), (nested(100_000), JSON_DEPTH_MAX)):
        with pytest.raises(storable.Unstorable, match=f"deeper than {limit} levels"):
            storable.check_depth(value, max_depth=limit)
    with pytest.raises(storable.Unstorable) as refused:
        storable.check_depth({"ok": 1, "state": nested(JSON_DEPTH_MAX)})
    assert refused.value.path.startswith("state.a.0.a.0")
    # What JSON cannot hold (a tuple, a scalar) takes the whole rule.
    for bad in ({"a": ("x\x00",)}, float("nan")):
        with pytest.raises(storable.Unstorable):
            storable.check_depth(bad)


def test_a_free_value_validated_without_a_reader_that_held_its_text_gets_the_whole_rule():
    from pydantic import ValidationError

    from quests.api.schemas import TEXT_HELD, CheckpointIn

    with pytest.raises(ValidationError, match="NUL"):
        CheckpointIn.model_validate({"agent_state": {"a": "x\x00y"}})
    with pytest.raises(ValidationError, match="NUL"):
        CheckpointIn.model_validate({"agent_state": {"a": "x\x00y"}}, context={"request": object()})
    held = CheckpointIn.model_validate({"agent_state": {"a": [1]}}, context={TEXT_HELD: True})
    assert held.agent_state == {"a": [1]}


def test_a_python_value_is_held_to_the_same_rule():
    for bad in ({"a": float("nan")}, {"a": [float("inf")]}, {"a": 10**400}, {"a\x00": 1}, {"a": "\ud800"}):
        with pytest.raises(storable.Unstorable):
            storable.check_json(bad)
    with pytest.raises(storable.Unstorable):
        storable.check_text("a\x00b")
    assert storable.check_text("plain é") == "plain é"


# ---- a body's bytes ----------------------------------------------------------------------------


@pytest.fixture
def running(agent) -> int:
    mission = agent.post("missions", {"title": "Bytes", "objective": "Read them"}).json()
    return agent.post(f"missions/{mission['id']}/runs", {}).json()["run"]["id"]


def _checkpoints(run_id: int) -> int:
    from checkpoints.models import Checkpoint

    return Checkpoint.objects.filter(run_id=run_id).count()


@pytest.mark.parametrize("where", ["agent_state", "note"])
def test_a_surrogate_sent_as_its_utf8_bytes_is_a_400_and_nothing_is_written(agent, running, where):
    # Not an escape: the three bytes UTF-8 would give U+D800, which no UTF-8 decoder takes.
    body = {"agent_state": {"a": "HERE"}} if where == "agent_state" else {"agent_state": {}, "note": "HERE"}
    raw = json.dumps(body).encode().replace(b"HERE", b"x\xed\xa0\x80y")
    before = _checkpoints(running)
    answer = agent.post(f"runs/{running}/checkpoints", raw=raw)
    assert answer.status_code == 400, answer.content[:300]
    assert answer.json()["error"]["code"] == "malformed_json" and "UTF-8" in answer.json()["error"]["message"]
    assert _checkpoints(running) == before


def test_a_utf16_body_is_held_to_the_same_rule(agent, running):
    before = _checkpoints(running)
    refused = agent.post(f"runs/{running}/checkpoints", raw=json.dumps({"agent_state": {"a": "x\u0000y"}}).encode("utf-16-le"))
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "agent_state.a", refused.content[:300]
    assert _checkpoints(running) == before
    kept = agent.post(f"runs/{running}/checkpoints", raw=json.dumps({"agent_state": {"a": "é"}}).encode("utf-16-le"))
    assert kept.status_code == 201, kept.content[:300]
    assert _checkpoints(running) == before + 1


# ---- one depth on every path that stores JSON ------------------------------------------------


def _interrupt(payload):
    return {"id": "i1", "action": "deploy", "payload": payload, "reason": "r"}


def _graph_writes(value):
    return {"thread_id": "t-w", "checkpoint_id": "c1", "task_id": "task", "writes": [{"idx": 0, "channel": "c", "value": value}]}


# (path, the body holding `value` where the API stores it, the field the error names)
STORED_JSON = {
    "agent state": ("runs/{run}/checkpoints", lambda v: {"agent_state": {"s": v}}, "agent_state"),
    "record data": ("runs/{run}/records", lambda v: {"kind": "note", "text": "x", "data": {"s": v}}, "data"),
    "operation request": ("runs/{run}/operations", lambda v: {"key": "k-deep", "kind": "e", "target": "t", "request": {"s": v}}, "request"),
    "approval payload": ("runs/{run}/approvals", lambda v: {"action": "a", "payload": {"s": v}, "reason": "r"}, "payload"),
    "batch payload": ("runs/{run}/approvals/batch", lambda v: {"items": [{"action": "a", "payload": {"s": v}, "reason": "r"}]}, "items.0.payload"),
    "milestone agent state": ("runs/{run}/milestones", lambda v: {"kind": "custom", "title": "t", "agent_state": {"s": v}}, "agent_state"),
    "receipt": ("operations/{op}/observe", lambda v: {"external_status": "sent", "receipt": {"s": v}}, "receipt"),
    "edited payload": ("approvals/{approval}/decision", lambda v: {"decision": "edit", "payload": {"s": v}}, "payload"),
    "langgraph checkpoint": (
        "langgraph/checkpoints",
        lambda v: {"thread_id": "t-c", "checkpoint": {"id": "c1", "s": v}},
        "checkpoint",
    ),
    "langgraph metadata": ("langgraph/checkpoints", lambda v: {"thread_id": "t-m", "checkpoint": {"id": "c1"}, "metadata": {"s": v}}, "metadata"),
    "langgraph channel value": (
        "langgraph/checkpoints",
        lambda v: {"thread_id": "t-v", "checkpoint": {"id": "c1"}, "channels": {"x": {"version": "1", "value": {"type": "json", "data": {"s": v}}}}},
        "channels.x.value.data",
    ),
    "langgraph write": ("langgraph/writes", lambda v: _graph_writes({"type": "json", "data": {"s": v}}), "writes.0.value.data"),
    "langgraph interrupt": (
        "langgraph/writes",
        lambda v: {**_graph_writes({"type": "json", "data": 1}), "interrupts": [_interrupt({"s": v})]},
        "interrupts.0.payload",
    ),
}


@pytest.fixture
def ids(agent) -> dict:
    """A running mission's run and attempted operation, and another mission's approval waiting
    for a decision."""
    mission = agent.post("missions", {"title": "Deep", "objective": "Nest"}).json()
    run = agent.post(f"missions/{mission['id']}/runs", {}).json()["run"]
    op = agent.post(f"runs/{run['id']}/operations", {"key": "k", "kind": "e", "target": "t", "request": {}}).json()
    agent.post(f"operations/{op['id']}/attempt")
    waiting = agent.post("missions", {"title": "Waiting", "objective": "Ask"}).json()
    waiting_run = agent.post(f"missions/{waiting['id']}/runs", {}).json()["run"]
    approval = agent.post(f"runs/{waiting_run['id']}/approvals", {"action": "a", "payload": {}, "reason": "r"}).json()
    return {"run": run["id"], "op": op["id"], "approval": approval["id"]}


@pytest.mark.parametrize("name", list(STORED_JSON))
def test_every_stored_json_value_may_nest_exactly_to_the_limit(agent, person, ids, name):
    path, body, field = STORED_JSON[name]
    caller = person if path.startswith("approvals/") else agent
    if path.startswith("langgraph/writes"):
        caller.post("langgraph/checkpoints", {"thread_id": "t-w", "checkpoint": {"id": "c1"}})
    too_deep = caller.post(path.format_map(ids), body(nested(JSON_DEPTH_MAX)))  # {"s": …} adds the one level too many
    assert too_deep.status_code == 422, (name, too_deep.content[:300])
    error = too_deep.json()["error"]
    assert error["code"] == "invalid" and error["field"] == field, error
    assert f"deeper than {JSON_DEPTH_MAX} levels" in error["message"]
    fits = caller.post(path.format_map(ids), body(nested(JSON_DEPTH_MAX - 1)))
    assert fits.status_code in (200, 201), (name, fits.content[:300])


def test_the_edit_form_takes_the_same_depth(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    refused = alice_client.post(
        f"/approvals/{approval.pk}/decide/", {"next": "/approvals/", "decision": "edit", "payload": json.dumps(nested(JSON_DEPTH_MAX + 1))}
    )
    assert refused.status_code == 422 and f"deeper than {JSON_DEPTH_MAX} levels" in refused.content.decode()
    kept = alice_client.post(f"/approvals/{approval.pk}/decide/", {"decision": "edit", "payload": json.dumps({"s": nested(JSON_DEPTH_MAX - 1)})})
    assert kept.status_code == 302
    approval.refresh_from_db()
    assert approval.status == "edited" and approval.decided_payload == {"s": nested(JSON_DEPTH_MAX - 1)}


# ---- the four 500s of the issue ---------------------------------------------------------------


def test_a_board_search_holding_a_nul_is_a_form_error(alice_client, alice):
    new_mission(alice, "Book the offsite")
    response = alice_client.get("/?q=a%00b")
    assert response.status_code == 422
    body = response.content.decode()
    assert "NUL character" in body and 'role="alert"' in body
    # The board polls with its search: refused the same way, never searched.
    polled = alice_client.get("/?q=a%00b&since=x", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="quest-list")
    assert polled.status_code == 422 and "NUL character" in polled.content.decode()


def test_a_token_mission_search_holding_a_nul_is_a_form_error(alice_client, alice):
    new_mission(alice, "Trip")
    response = alice_client.get("/tokens/?mission_q=a%00b")
    assert response.status_code == 422 and "NUL character" in response.content.decode()
    live = alice_client.get("/tokens/?mission_q=a%00b", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="mission-choices")
    assert live.status_code == 422 and "NUL character" in live.content.decode()
    found = alice_client.post("/tokens/", {"name": "laptop agent", "mission_q": "a\x00b", "find": "1"})
    assert found.status_code == 422 and "NUL character" in found.content.decode()
    assert 'value="laptop agent"' in found.content.decode()  # what was typed is kept


@pytest.mark.parametrize(
    "text",
    [
        '{"\\u0000": 1}',
        '{"a": "\\u0000"}',
        '{"\\ud800": 1}',
        '{"a": NaN}',
        '{"a": 1e999}',
        nested_text(JSON_DEPTH_MAX + 1),
        nested_text(50_000),
        '{"a": 1, "a": 2}',
    ],
)
def test_a_langgraph_filter_that_cannot_be_kept_is_a_422(agent, text):
    response = agent.get(f"langgraph/checkpoints?thread_id=t&filter={quote(text)}")
    assert response.status_code == 422, response.content[:300]
    assert response.json()["error"]["code"] == "invalid" and response.json()["error"]["field"] == "filter"


def test_a_langgraph_filter_that_can_be_kept_still_filters(agent):
    agent.post("langgraph/checkpoints", {"thread_id": "t", "checkpoint": {"id": "c1"}, "metadata": {"source": "input", "step": 1}})
    agent.post("langgraph/checkpoints", {"thread_id": "t", "checkpoint": {"id": "c2"}, "metadata": {"source": "loop", "step": 2}})
    found = agent.get(f"langgraph/checkpoints?thread_id=t&filter={quote(json.dumps({'source': 'loop'}))}")
    assert found.status_code == 200 and [item["checkpoint_id"] for item in found.json()["items"]] == ["c2"]


EDITED_PAYLOADS = {
    "NUL": '{"a": "x\\u0000"}',
    "NUL in a key": '{"\\u0000": 1}',
    "NaN": '{"a": NaN}',
    "1e999": '{"a": 1e999}',
    "lone surrogate": '{"a": "\\ud800"}',
    "deep nesting": nested_text(JSON_DEPTH_MAX + 1),
    "nesting past the parser": nested_text(100_000),
    "an integer past a double": '{"a": 1' + "0" * 5000 + "}",
}


@pytest.mark.parametrize("name", list(EDITED_PAYLOADS))
def test_edit_and_approve_with_an_unstorable_payload_is_a_form_error(alice_client, alice, name):
    mission, approval = waiting_on_approval(alice)
    response = alice_client.post(
        f"/approvals/{approval.pk}/decide/", {"next": f"/missions/{mission.pk}/", "decision": "edit", "payload": EDITED_PAYLOADS[name]}
    )
    assert response.status_code == 422, (name, response.status_code)
    assert 'role="alert"' in response.content.decode() and "Nothing was changed." in response.content.decode()
    assert Approval.objects.get(pk=approval.pk).status == "pending"


ROOT = Path(__file__).resolve().parent.parent


def test_no_page_form_or_endpoint_parses_a_clients_json_itself():
    """The rule stays one: whatever reads JSON from a client goes through quests.storable."""
    readers = [
        *(ROOT / "quests" / "api").glob("*.py"),
        *(ROOT / "quests" / "web").glob("*.py"),
        ROOT / "quests" / "forms.py",
        *(ROOT / "quests" / "retention").glob("*.py"),
    ]
    assert [str(path) for path in readers if "json.loads(" in path.read_text()] == []


def test_the_documented_depth_is_the_enforced_one():
    api_md = (ROOT / "docs" / "api.md").read_text()
    assert "### JSON values" in api_md and f"nests at most **{JSON_DEPTH_MAX} levels**" in api_md
