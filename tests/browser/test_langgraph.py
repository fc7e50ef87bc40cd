"""A LangGraph graph's interrupt decided by a person in a real browser: it waits in the inbox and on
the mission page like any approval, and the graph resumes with the decision."""

import pytest
from playwright.sync_api import expect

from questlog_client.langgraph import QuestlogSaver
from quests.services.tokens import token_create
from tests.langgraph.test_saver import config, stopped_at_interrupt

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_person_approves_a_graphs_interrupt_in_the_browser_and_the_graph_finishes(page, open_page, login, live_server, alice):
    with QuestlogSaver(live_server.url, token_create(user=alice, name="graph")[1], backoff=0.01) as saver:
        graph = stopped_at_interrupt(saver)
        mission_id = saver.mission_id(config())
        login(alice)
        open_page("/approvals/")
        expect(page.get_by_role("article", name="send the invitations")).to_contain_text("Emails cannot be unsent.")
        open_page(f"/missions/{mission_id}/")
        expect(page.locator("#mission-status")).to_have_text("Waiting for approval")
        card = page.get_by_role("article", name="send the invitations")
        expect(card).to_contain_text("team@example.com")
        card.get_by_role("button", name="Approve", exact=True).click()
        expect(page.locator("#mission-status")).to_have_text("Ready")

        command = saver.resume_command(config())
        assert command.resume["decision"] == "approved"
        result = graph.invoke(command, config())
        assert result["answer"]["payload"]["to"] == "team@example.com"
        assert saver.resume_command(config()) is None
