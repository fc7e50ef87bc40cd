"""How replaycheck names the steps of a LangGraph agent (the same in every execution: no ids), and
how it follows the approvals an interrupt asked for. Needs neither Django nor a server."""

from questlog_client.replay.compare import compare
from questlog_client.replay.execution import Execution
from questlog_client.replay.steps import step_label

TASK = "2a3994b0-9237-0f33-654d-f2a78b31e098"


def test_checkpoints_are_named_by_namespace_source_and_step_without_task_ids():
    sent = {"checkpoint_ns": "", "metadata": {"source": "loop", "step": 3}, "checkpoint": {"id": "1f1e"}}
    assert step_label("POST", "langgraph/checkpoints", sent, {"mission_id": 7}) == "langgraph checkpoint loop 3"
    nested = {**sent, "checkpoint_ns": f"research:{TASK}|search:{TASK}", "metadata": {"source": "input", "step": -1}}
    assert step_label("POST", "langgraph/checkpoints", nested, {}) == "langgraph checkpoint research|search input -1"


def test_writes_are_named_by_node_and_channels_and_say_when_they_ask_a_person():
    node = {
        "task_id": TASK,
        "task_path": "~__pregel_pull, approve",
        "checkpoint_ns": "",
        "writes": [{"channel": "__interrupt__"}],
        "interrupts": [{"id": "abc", "action": "send"}],
    }
    assert step_label("POST", "langgraph/writes", node, {"approvals": []}) == "langgraph writes approve: __interrupt__ (asks 1 approval)"
    resume = {"task_id": "00000000-0000-0000-0000-000000000000", "task_path": "", "writes": [{"channel": "__resume__"}], "interrupts": []}
    assert step_label("POST", "langgraph/writes", resume, {}) == "langgraph writes (command): __resume__"
    repeated = {"task_path": "~__pregel_pull, plan", "writes": [{"channel": "plan"}, {"channel": "plan"}, {"channel": "branch:to:hold"}]}
    assert step_label("POST", "langgraph/writes", repeated, {}) == "langgraph writes plan: plan, branch:to:hold"


def test_the_session_and_thread_calls_have_plain_names_and_reads_are_no_steps():
    assert step_label("POST", "langgraph/session", {"thread_id": "mission-7"}, {"id": 4}) == "langgraph session"
    assert step_label("POST", "langgraph/threads/delete", {"thread_id": "t"}, {}) == "langgraph delete thread"
    assert step_label("POST", "langgraph/prune", {"thread_ids": ["t"], "strategy": "delete"}, {}) == "langgraph prune delete"
    assert step_label("GET", "langgraph/checkpoints", None, {"items": []}) is None
    assert step_label("GET", "langgraph/thread", None, {}) is None


def _bundle_event(at: float, approvals: list[dict]) -> dict:
    bundle = {"constraints": [], "decisions": [], "approvals": approvals, "milestones": []}
    return {"type": "bundle", "asked_at": at, "got_at": at + 0.01, "bundle": bundle, "proc": "2"}


def test_an_approval_an_interrupt_asked_for_must_be_in_every_later_bundle():
    asked = {
        "type": "step",
        "at": 1.0,
        "path": "langgraph/writes",
        "label": "langgraph writes approve: __interrupt__",
        "sent": {"interrupts": [{"id": "abc"}]},
        "answer": {"approvals": [{"id": 41, "status": "pending"}]},
        "proc": "1",
    }
    baseline = Execution(None, steps=[asked["label"]])
    kept = Execution(1, events=[asked, _bundle_event(2.0, [{"id": 41, "status": "pending"}])])
    assert compare(baseline, kept).forgotten == 0
    forgotten = Execution(1, events=[asked, _bundle_event(2.0, [])])
    row = compare(baseline, forgotten)
    assert row.forgotten == 1 and "approval 41 missing from a bundle" in row.details


def test_approvals_asked_in_a_batch_are_followed_too():
    asked = {
        "type": "step",
        "at": 1.0,
        "path": "runs/3/approvals/batch",
        "label": "POST runs/{id}/approvals/batch",
        "sent": {},
        "answer": {"items": [{"id": 5}, {"id": 6}]},
        "proc": "1",
    }
    row = compare(Execution(None, steps=[asked["label"]]), Execution(1, events=[asked, _bundle_event(2.0, [{"id": 5, "status": "pending"}])]))
    assert row.forgotten == 1 and row.details == ["approval 6 missing from a bundle"]
