"""A LangGraph graph's interrupts decided by a person in a real browser: they wait in the inbox and on
the mission page like any approval (a node's several questions one after another, parallel ones
together, each saying which question it is), and the graph resumes with the decisions."""

import pytest
from playwright.sync_api import expect

from questlog_client.langgraph import QuestlogSaver
from quests.services.tokens import token_create
from tests.langgraph.test_multi_question import two_question_graph
from tests.langgraph.test_saver import config, stopped_at_interrupt

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def approve_on_the_mission_page(page, open_page, mission_id: int, action: str, shown: str) -> None:
    """The mission waits; its card for `action` shows `shown`; approving it makes the mission ready."""
    open_page(f"/missions/{mission_id}/")
    expect(page.locator("#mission-status")).to_have_text("Waiting for approval")
    card = page.get_by_role("article", name=action)
    expect(card).to_contain_text(shown)
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#mission-status")).to_have_text("Ready")


def test_a_person_approves_a_graphs_interrupt_in_the_browser_and_the_graph_finishes(page, open_page, login, live_server, alice):
    with QuestlogSaver(live_server.url, token_create(user=alice, name="graph")[1], backoff=0.01) as saver:
        graph = stopped_at_interrupt(saver)
        mission_id = saver.mission_id(config())
        login(alice)
        open_page("/approvals/")
        expect(page.get_by_role("article", name="send the invitations")).to_contain_text("Emails cannot be unsent.")
        approve_on_the_mission_page(page, open_page, mission_id, "send the invitations", "team@example.com")

        command = saver.resume_command(config())
        assert command.resume["decision"] == "approved"
        result = graph.invoke(command, config())
        assert result["answer"]["payload"]["to"] == "team@example.com"
        assert saver.resume_command(config()) is None


def test_a_person_answers_a_nodes_questions_one_after_another_in_the_browser(page, open_page, login, live_server, alice):
    with QuestlogSaver(live_server.url, token_create(user=alice, name="graph")[1], backoff=0.01) as saver:
        graph = two_question_graph(saver, with_catering=True)
        graph.invoke({"request": "Plan the offsite"}, config())
        mission_id = saver.mission_id(config())
        login(alice)

        # Two nodes ask at once (LangGraph runs them concurrently, so either may ask first): both wait
        # in the inbox, each with its own decision.
        open_page("/approvals/")
        cards = page.locator("article.approval")
        expect(cards).to_have_count(2)
        expect(page.get_by_role("article", name="book the venue")).to_contain_text("The graph waits on question 1 of its node book_and_invite.")
        expect(page.get_by_role("article", name="order the catering")).to_contain_text("The graph waits on question 1 of its node cater.")
        page.get_by_role("article", name="book the venue").get_by_role("button", name="Approve", exact=True).click()
        expect(cards).to_have_count(1)
        assert saver.resume_command(config()) is None  # the catering question still waits
        catering = page.get_by_role("article", name="order the catering")
        catering.get_by_label("Note for the agent").fill("Lunch is taken care of.")  # a rejection says why
        catering.get_by_role("button", name="Reject", exact=True).click()
        expect(cards).to_have_count(0)

        command = saver.resume_command(config())
        assert len(command.resume) == 2  # the map LangGraph resumes parallel questions with
        graph.invoke(command, config())

        # The node's second question: the mission page says which question the graph waits on.
        approve_on_the_mission_page(
            page,
            open_page,
            mission_id,
            "send the invitations",
            "The graph waits on question 2 of its node book_and_invite; the earlier ones are decided.",
        )

        result = graph.invoke(saver.resume_command(config()), config())
        assert (result["venue"]["decision"], result["catering"]["decision"], result["invite"]["decision"]) == ("approved", "rejected", "approved")
