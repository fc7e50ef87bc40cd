"""A node that asks a person several questions (interrupt() called more than once) and nodes that
ask in parallel, against a live server: each question is its own approval, in order, naming its
node and its number; `resume_command` answers one question with its value and several with the map
LangGraph expects; the graph ends with every answer."""

from typing import TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from questlog_client.langgraph import QuestlogSaver
from quests.models import Approval
from tests.langgraph.test_saver import config, person, saver  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

VENUE = {"action": "book the venue", "payload": {"venue": "Pine Lodge"}, "reason": "It costs a deposit."}
INVITE = {"action": "send the invitations", "payload": {"to": "team@example.com"}, "reason": "Emails cannot be unsent."}
CATERING = {"action": "order the catering", "payload": {"meals": 40}, "reason": "It is paid in advance."}


class Plan(TypedDict, total=False):
    request: str
    venue: dict
    invite: dict
    catering: dict


def book_and_invite(state: Plan) -> Plan:
    venue = interrupt(VENUE)
    invite = interrupt(INVITE)
    return {"venue": venue, "invite": invite}


def cater(state: Plan) -> Plan:
    return {"catering": interrupt(CATERING)}


def two_question_graph(saver: QuestlogSaver, *, with_catering: bool = False):
    builder = StateGraph(Plan)
    builder.add_node("book_and_invite", book_and_invite)
    builder.add_edge(START, "book_and_invite")
    builder.add_edge("book_and_invite", END)
    if with_catering:
        builder.add_node("cater", cater)
        builder.add_edge(START, "cater")
        builder.add_edge("cater", END)
    return builder.compile(checkpointer=saver)


def pending(mission_id: int) -> list[tuple[str, str, int | None]]:
    return list(Approval.objects.filter(mission_id=mission_id, status="pending").order_by("id").values_list("action", "node", "question"))


def test_a_nodes_questions_are_asked_one_after_another_each_with_its_own_decision(saver, person):
    graph = two_question_graph(saver)
    graph.invoke({"request": "Plan the offsite"}, config())
    mission_id = saver.mission_id(config())
    assert pending(mission_id) == [("book the venue", "book_and_invite", 1)]

    [venue] = Approval.objects.filter(mission_id=mission_id, status="pending")
    person.decide_approval(venue.id, "edit", payload={"venue": "Lake House"}, note="The lodge is full.")
    command = saver.resume_command(config())
    assert command.resume == {"decision": "approved", "payload": {"venue": "Lake House"}, "note": "The lodge is full."}
    graph.invoke(command, config())
    assert pending(mission_id) == [("send the invitations", "book_and_invite", 2)]
    assert saver.resume_command(config()) is None  # the second question is not answered yet

    [invite] = Approval.objects.filter(mission_id=mission_id, status="pending")
    person.decide_approval(invite.id, "reject", note="Wait for the venue's confirmation.")
    result = graph.invoke(saver.resume_command(config()), config())
    assert result["venue"]["payload"] == {"venue": "Lake House"}
    assert result["invite"] == {"decision": "rejected", "payload": INVITE["payload"], "note": "Wait for the venue's confirmation."}
    asked = Approval.objects.filter(mission_id=mission_id).order_by("id")
    assert [(a.action, a.question, a.status) for a in asked] == [("book the venue", 1, "edited"), ("send the invitations", 2, "rejected")]
    assert saver.resume_command(config()) is None


def test_questions_pending_together_are_answered_with_the_map_of_every_decision(saver, person):
    graph = two_question_graph(saver, with_catering=True)
    first = graph.invoke({"request": "Plan the offsite"}, config())
    assert len(first["__interrupt__"]) == 2
    mission_id = saver.mission_id(config())
    # The two nodes run concurrently: either may ask first.
    assert sorted(pending(mission_id)) == [("book the venue", "book_and_invite", 1), ("order the catering", "cater", 1)]
    venue = Approval.objects.get(mission_id=mission_id, action="book the venue")
    catering = Approval.objects.get(mission_id=mission_id, action="order the catering")

    person.decide_approval(venue.id, "approve")
    assert saver.resume_command(config()) is None  # one of the two still waits
    person.decide_approval(catering.id, "approve")
    command = saver.resume_command(config())
    assert isinstance(command, Command) and set(command.resume) == {venue.agent_ref, catering.agent_ref}
    assert command.resume[catering.agent_ref]["payload"] == {"meals": 40}

    graph.invoke(command, config())
    # The catering node is done; the other node asks its second question, alone.
    assert pending(mission_id) == [("send the invitations", "book_and_invite", 2)]
    [invite] = Approval.objects.filter(mission_id=mission_id, status="pending")
    person.decide_approval(invite.id, "approve")
    command = saver.resume_command(config())
    assert command.resume["payload"] == INVITE["payload"]
    result = graph.invoke(command, config())
    assert (result["venue"]["decision"], result["invite"]["decision"], result["catering"]["decision"]) == ("approved",) * 3
