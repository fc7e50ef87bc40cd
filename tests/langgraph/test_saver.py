"""QuestlogSaver with real graphs against a live server: a thread is a mission, a checkpoint is a
Questlog checkpoint, an interrupt is an approval a person decides, and a stopped or deleted thread
refuses to go on."""

from typing import TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from checkpoints.models import Checkpoint
from questlog_client import MissionNotStartable
from questlog_client.errors import ApiError
from questlog_client.fake_service import FakeService
from questlog_client.langgraph import QuestlogSaver
from questlog_client.people import PersonSession
from quests.langgraph.models import GraphCheckpoint
from quests.models import Approval, GraphThread, Mission
from quests.services.tokens import token_create

pytestmark = pytest.mark.django_db(transaction=True)


class State(TypedDict, total=False):
    request: str
    plan: str
    answer: dict


def plan(state: State) -> State:
    return {"plan": f"Plan for {state['request']}"}


def ask(state: State) -> State:
    answer = interrupt(
        {
            "action": "send the invitations",
            "payload": {"to": "team@example.com", "plan": state["plan"]},
            "reason": "Emails cannot be unsent.",
        }
    )
    return {"answer": answer}


def ask_plainly(state: State) -> State:
    return {"answer": interrupt("May I book the lodge?")}


def graph_with(saver: QuestlogSaver, asking=ask):
    builder = StateGraph(State)
    builder.add_node("plan", plan)
    builder.add_node("ask", asking)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


@pytest.fixture
def saver(live_server, alice):
    with QuestlogSaver(live_server.url, token_create(user=alice, name="graph")[1], backoff=0.01) as saver:
        yield saver


@pytest.fixture
def person(live_server, alice):
    session = PersonSession(live_server.url, "alice", "alice-password")
    yield session
    session.close()


def config(thread_id: str = "offsite-42") -> dict:
    return {"configurable": {"thread_id": thread_id}}


def stopped_at_interrupt(saver: QuestlogSaver, asking=ask, thread_id: str = "offsite-42"):
    graph = graph_with(saver, asking)
    result = graph.invoke({"request": "Plan the offsite"}, config(thread_id))
    assert "__interrupt__" in result
    return graph


def test_a_thread_is_a_mission_titled_from_its_input_and_its_checkpoints_are_questlog_checkpoints(saver):
    stopped_at_interrupt(saver)
    mission = Mission.objects.get(pk=saver.mission_id(config()))
    assert mission.title == "Plan the offsite"
    assert GraphThread.objects.get(mission=mission).thread_id == "offsite-42"
    graph_rows = GraphCheckpoint.objects.filter(mission=mission)
    assert graph_rows.count() == 3  # input, after plan, after the interrupt
    assert set(Checkpoint.objects.filter(graph__in=graph_rows).values_list("trigger", flat=True)) == {"agent"}
    # The channel values are the agent state people read on the checkpoint page.
    newest = graph_rows.order_by("-graph_id").first().checkpoint
    assert {"request", "plan"} <= set(newest.agent_state_refs)


def test_only_changed_channels_travel_and_unchanged_ones_are_references(saver):
    stopped_at_interrupt(saver)
    rows = list(GraphCheckpoint.objects.order_by("graph_id"))
    after_plan, after_interrupt = rows[1], rows[2]
    # `request` did not change after the input: the same blob at the same version.
    assert after_plan.channels["request"] == after_interrupt.channels["request"]
    assert after_plan.checkpoint.agent_state_refs["request"] == after_interrupt.checkpoint.agent_state_refs["request"]


def test_an_interrupt_becomes_an_approval_and_approving_resumes_the_graph(saver, person):
    graph = stopped_at_interrupt(saver)
    mission_id = saver.mission_id(config())
    approval = Approval.objects.get(mission_id=mission_id)
    assert (approval.action, approval.reason) == ("send the invitations", "Emails cannot be unsent.")
    assert approval.payload == {"to": "team@example.com", "plan": "Plan for Plan the offsite"}
    assert person.mission(mission_id)["status"] == "waiting_for_approval"
    assert saver.resume_command(config()) is None  # nobody decided yet

    person.decide_approval(approval.pk, "approve", note="Go ahead")
    command = saver.resume_command(config())
    assert command.resume == {"decision": "approved", "payload": approval.payload, "note": "Go ahead"}
    result = graph.invoke(command, config())
    assert result["answer"]["decision"] == "approved"
    assert saver.resume_command(config()) is None  # nothing waits any more


def test_edit_and_approve_resumes_with_the_edited_payload_and_reject_with_the_note(saver, person):
    graph = stopped_at_interrupt(saver)
    approval = Approval.objects.get()
    person.decide_approval(approval.pk, "edit", payload={"to": "boss@example.com"}, note="Only the boss")
    assert saver.resume_command(config()).resume == {"decision": "approved", "payload": {"to": "boss@example.com"}, "note": "Only the boss"}

    other = stopped_at_interrupt(saver, thread_id="other")
    rejected = Approval.objects.get(mission_id=saver.mission_id(config("other")))
    person.decide_approval(rejected.pk, "reject", note="Not before Friday")
    command = saver.resume_command(config("other"))
    assert command.resume["decision"] == "rejected" and command.resume["note"] == "Not before Friday"
    assert other.invoke(command, config("other"))["answer"]["decision"] == "rejected"
    assert graph.invoke(saver.resume_command(config()), config())["answer"]["payload"] == {"to": "boss@example.com"}


def test_an_interrupt_with_a_plain_value_is_the_payload_and_comes_back_as_itself(saver, person):
    graph = stopped_at_interrupt(saver, ask_plainly)
    approval = Approval.objects.get()
    assert approval.payload == {"value": "May I book the lodge?"}
    assert approval.action == "continue the graph"
    person.decide_approval(approval.pk, "approve")
    assert graph.invoke(saver.resume_command(config()), config())["answer"]["payload"] == "May I book the lodge?"


def test_invoking_again_before_the_decision_asks_nothing_new(saver):
    graph = stopped_at_interrupt(saver)
    graph.invoke(None, config())
    assert Approval.objects.count() == 1


@pytest.mark.parametrize("stop", ["pause", "cancel"])
def test_pause_and_cancel_stop_the_graph_from_being_resumed(saver, person, stop):
    graph = stopped_at_interrupt(saver)
    mission_id = saver.mission_id(config())
    getattr(person, stop)(mission_id)
    with pytest.raises(MissionNotStartable) as refused:
        saver.resume_command(config())
    assert refused.value.mission_status in ("paused", "cancelled")
    # Nor can the graph go on by itself: its next save is refused.
    with pytest.raises(ApiError) as write_refused:
        graph.invoke({"request": "Something else"}, config())
    assert write_refused.value.code == "mission_not_startable"


def test_a_deleted_thread_stays_deleted_and_a_late_put_is_refused(saver):
    graph = stopped_at_interrupt(saver)
    mission_id = saver.mission_id(config())
    late = saver.get_tuple(config())
    saver.delete_thread("offsite-42")
    assert saver.get_tuple(config()) is None
    mission = Mission.objects.get(pk=mission_id)
    assert mission.status == "cancelled" and mission.purged_at is not None
    assert not Checkpoint.objects.filter(mission=mission).exists()
    with pytest.raises(ApiError) as refused:
        saver.put(late.config, late.checkpoint, late.metadata, {})
    assert (refused.value.status, refused.value.code) == (410, "thread_deleted")
    with pytest.raises(ApiError):
        graph.invoke({"request": "Again"}, config())


def test_metadata_is_kept_and_filterable(saver):
    stopped_at_interrupt(saver)
    inputs = list(saver.list(config(), filter={"source": "input"}))
    assert [t.metadata["step"] for t in inputs] == [-1]
    assert [t.metadata["step"] for t in saver.list(config(), filter={"source": "loop", "step": 1})] == [1]
    assert list(saver.list(config(), filter={"source": "loop", "step": 7})) == []


def test_another_users_thread_of_the_same_id_is_another_mission(saver, live_server, bob):
    stopped_at_interrupt(saver)
    with QuestlogSaver(live_server.url, token_create(user=bob, name="graph")[1]) as bobs:
        assert bobs.get_tuple(config()) is None
        stopped_at_interrupt(bobs)
        assert bobs.mission_id(config()) != saver.mission_id(config())


def test_a_node_side_effect_goes_through_the_ledger_once(saver, tmp_path):
    service = FakeService(tmp_path / "service.sqlite3")
    calls = []

    def send(state: State) -> State:
        request = {"to": "team@example.com"}
        receipt = saver.operation(config(), "invite", "email.send", "team@example.com", request, reconcile=service.lookup)(
            service.effect("email.send", "team@example.com", request)
        )
        calls.append(receipt.replayed)
        return {"plan": "sent"}

    builder = StateGraph(State)
    builder.add_node("send", send)
    builder.add_edge(START, "send")
    builder.add_edge("send", END)
    graph = builder.compile(checkpointer=saver)
    graph.invoke({"request": "Invite"}, config())
    # A node re-run (as after a crash or a resume) gets the stored receipt instead.
    send({"request": "Invite"})
    assert calls == [False, True]
    assert sum(service.effects().values()) == 1


def test_a_restore_in_questlog_is_where_the_graph_resumes(saver, person):
    graph = stopped_at_interrupt(saver)
    mission_id = saver.mission_id(config())
    person.decide_approval(Approval.objects.get().pk, "approve")
    graph.invoke(saver.resume_command(config()), config())
    after_plan = GraphCheckpoint.objects.get(mission_id=mission_id, metadata__source="loop", metadata__step=1)
    person.pause(mission_id)
    person.restore(mission_id, after_plan.checkpoint_id)

    latest = saver.get_tuple(config())
    assert latest.metadata["source"] == "fork" and latest.metadata["questlog_restored_from"] == after_plan.graph_id
    assert latest.parent_config["configurable"]["checkpoint_id"] == after_plan.graph_id
    values = latest.checkpoint["channel_values"]
    assert values["plan"] == "Plan for Plan the offsite" and "answer" not in values
    # The graph goes on from the restored point: it asks the person again.
    result = graph.invoke(None, config())
    assert "__interrupt__" in result
    assert Approval.objects.filter(mission_id=mission_id, status="pending").count() == 1


def test_versions_sort_as_text_and_as_numbers(saver):
    versions = [None]
    for _ in range(12):
        versions.append(saver.get_next_version(versions[-1], None))
    made = versions[1:]
    assert made == sorted(made) and len(set(made)) == len(made)
    assert [int(v.split(".")[0]) for v in made] == list(range(1, 13))
    assert saver.get_next_version(7, None).startswith(f"{8:032d}.")  # an int version from another saver


def test_a_copied_thread_keeps_the_completed_side_effects_so_its_resume_repeats_none(saver, tmp_path):
    service = FakeService(tmp_path / "service.sqlite3")
    request = {"to": "team@example.com"}

    def send(state: State) -> State:
        saver.operation(config(), "invite", "email.send", "team@example.com", request)(service.effect("email.send", "team@example.com", request))
        return {"plan": "sent"}

    builder = StateGraph(State)
    builder.add_node("send", send)
    builder.add_edge(START, "send")
    builder.add_edge("send", END)
    builder.compile(checkpointer=saver).invoke({"request": "Invite"}, config())
    saver.copy_thread("offsite-42", "offsite-copy")
    assert saver.get_tuple(config("offsite-copy")).checkpoint["id"] == saver.get_tuple(config()).checkpoint["id"]
    assert saver.mission_id(config("offsite-copy")) != saver.mission_id(config())
    again = saver.operation(config("offsite-copy"), "invite", "email.send", "team@example.com", request)(
        service.effect("email.send", "team@example.com", request)
    )
    assert again.replayed and sum(service.effects().values()) == 1


def test_a_restore_to_a_subgraphs_checkpoint_takes_the_root_and_the_subgraph_back_there(saver, person):
    def child_asks(state: State) -> State:
        return {"answer": interrupt("May I book the lodge?")}

    child = StateGraph(State)
    child.add_node("prepare", lambda state: {"plan": f"{state['plan']}, prepared"})
    child.add_node("ask", child_asks)
    child.add_edge(START, "prepare")
    child.add_edge("prepare", "ask")
    child.add_edge("ask", END)
    builder = StateGraph(State)
    builder.add_node("plan", plan)
    builder.add_node("child", child.compile())
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "child")
    builder.add_edge("child", END)
    graph = builder.compile(checkpointer=saver)
    assert "__interrupt__" in graph.invoke({"request": "Plan the offsite"}, config())
    mission_id = saver.mission_id(config())
    person.decide_approval(Approval.objects.get().pk, "approve")
    graph.invoke(saver.resume_command(config()), config())
    prepared = GraphCheckpoint.objects.exclude(ns="").get(mission_id=mission_id, metadata__step=1)  # the child after `prepare`
    root_before_child = GraphCheckpoint.objects.get(mission_id=mission_id, ns="", metadata__source="loop", metadata__step=1)
    person.pause(mission_id)
    person.restore(mission_id, prepared.checkpoint_id)

    # The subgraph's newest state is the restored point, not the answer given after it…
    child_now = saver.get_tuple({"configurable": {"thread_id": "offsite-42", "checkpoint_ns": prepared.ns}})
    assert child_now.metadata["questlog_restored_from"] == prepared.graph_id
    assert child_now.checkpoint["channel_values"]["plan"] == "Plan for Plan the offsite, prepared"
    assert "answer" not in child_now.checkpoint["channel_values"]
    # …and the root's newest is a fork of where the child was running (not the finished graph),
    # on the restore checkpoint that is the mission's head.
    root_now = saver.get_tuple(config())
    assert root_now.metadata["source"] == "fork" and root_now.metadata["questlog_restored_from"] == root_before_child.graph_id
    head = Mission.objects.get(pk=mission_id).head_checkpoint
    assert head.trigger == "restore" and GraphCheckpoint.objects.get(checkpoint=head).graph_id == root_now.checkpoint["id"]
    # The graph goes on from there: the child runs again and asks again.
    assert "__interrupt__" in graph.invoke(None, config())
    assert Approval.objects.filter(mission_id=mission_id, status="pending").count() == 1
