"""replaycheck's StepWatch: the transport under an agent's client that names each step (a
state-changing call the server accepted, or a side effect) and hears each bundle, without any hook
in the client. Against a scripted server, so it needs neither Django nor a database."""

import json
from typing import Any

import httpx
import pytest

from questlog_client import InvalidInput, Mission, Questlog, Run
from questlog_client.models import Mission as MissionInfo
from questlog_client.replay.steps import Step, StepWatch, step_label

BUNDLE = {"mission": {"id": 7, "status": "running"}, "next_action": "resume", "constraints": [{"id": 1, "text": "Budget"}]}


def server(request: httpx.Request) -> httpx.Response:
    """Answers like Questlog would, just enough for the client to carry on."""
    path = request.url.path.removeprefix("/api/v1/")
    body = json.loads(request.content) if request.content else {}
    if path == "missions/7/resume":
        return httpx.Response(200, json=BUNDLE)
    if path == "missions/7/runs":
        return httpx.Response(201, json={"run": {"id": 3, "mission_id": 7}, "resume": BUNDLE})
    if path == "runs/3/records" and body.get("text") == "refused":
        return httpx.Response(422, json={"error": {"code": "invalid_input", "message": "no", "field": "text"}})
    if path == "runs/3/operations":
        return httpx.Response(201, json={"id": 11, "key": body["key"], "status": "planned"})
    if path.startswith("operations/11/"):
        status = {"attempt": "attempted", "complete": "completed", "fail": "failed"}[path.rsplit("/", 1)[1]]
        return httpx.Response(200, json={"id": 11, "key": "hold", "status": status, "external_id": "H-1", "external_status": "held"})
    if path == "runs/3/stop":
        return httpx.Response(200, json={"id": 3, "stop_reason": body["reason"]})
    return httpx.Response(201, json={"id": 1, **body})


class Heard:
    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.bundles: list[tuple[str, float, float]] = []

    def step(self, step: Step) -> None:
        self.steps.append(step)

    def bundle(self, bundle: Any, asked_at: float, got_at: float) -> None:
        self.bundles.append((bundle.next_action, asked_at, got_at))


def watched() -> tuple[Questlog, Heard]:
    heard = Heard()
    ql = Questlog("http://questlog.test", "qlt_x", heartbeat_interval=0, transport=StepWatch(heard.step, heard.bundle, inner=httpx.MockTransport(server)))
    return ql, heard


def test_it_names_each_accepted_write_and_each_side_effect_in_order():
    ql, heard = watched()
    with ql:
        run = _start(ql)
        run.record("decision", "Use Lakeside", key="venue")
        run.record("note", "a generated key is not part of a label")
        run.heartbeat()
        receipt = run.operation("hold", kind="reservation.hold", target="lakeside", request={})(lambda op: {"external_id": "H-1", "external_status": "held"})
        run.stop("completed", "done")
    assert receipt.operation.status == "completed"
    assert [s.label for s in heard.steps] == [
        "start run",
        "record decision venue",
        "record note",
        "operation hold: plan",
        "operation hold: attempt",
        "operation hold: side effect",
        "operation hold: complete",
        "stop completed",
    ]
    assert [s.number for s in heard.steps] == list(range(1, 9))
    effect = heard.steps[5]
    assert (effect.method, effect.path, effect.status, effect.answer) == ("EFFECT", "operations/11", 0, None)
    assert heard.steps[1].sent["key"] == "venue" and heard.steps[1].answer["text"] == "Use Lakeside"
    assert heard.steps[1].path == "runs/3/records"


def test_a_refused_call_and_a_read_are_no_steps_and_bundles_are_heard_with_their_times():
    ql, heard = watched()
    with ql:
        run = _start(ql)
        with pytest.raises(InvalidInput):
            run.record("note", "refused")
        run.refresh_bundle()
    assert [s.label for s in heard.steps] == ["start run"]
    assert [b[0] for b in heard.bundles] == ["resume", "resume"]  # start_run's bundle, then the GET's
    assert all(asked <= got for _, asked, got in heard.bundles)


def test_a_completion_after_reconciling_ran_no_side_effect():
    ql, heard = watched()
    with ql:
        _start(ql)
        ql.request("POST", "operations/11/complete", {"external_id": "H-1", "external_status": "held", "receipt": None})
    assert [s.label for s in heard.steps] == ["start run", "operation hold: complete"]


def test_labels_carry_no_ids_and_no_generated_keys():
    assert step_label("POST", "missions/12/constraints", {"text": "x", "key": "ql-" + "0" * 32}, {}) == "add constraint"
    assert step_label("POST", "runs/9/checkpoints", {"key": "ql-" + "a" * 32}, {}) == "checkpoint"
    assert step_label("POST", "runs/9/checkpoints", {"key": "research:done"}, {}) == "checkpoint research:done"
    assert step_label("POST", "runs/9/milestones", {"kind": "plan_approved", "gate": True}, {}) == "milestone plan_approved (gate)"
    assert step_label("POST", "runs/9/heartbeat", None, {}) is None
    assert step_label("GET", "missions/12", None, {}) is None
    assert step_label("POST", "runs/9/somewhere-new", {}, {}) == "POST runs/{id}/somewhere-new"


def _start(ql: Questlog) -> Run:
    return Mission(ql, MissionInfo(id=7)).start_run(agent="tester")
