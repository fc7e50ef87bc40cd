"""Deciding approvals in a real browser: approve, edit and approve, and the inbox count."""

import json

import pytest
from playwright.sync_api import expect

from quests.models import Approval
from tests.builders import agent_for, waiting_on_approval

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def mark_page(page) -> None:
    """A flag that a full page load would wipe out: it proves an action swapped a fragment."""
    page.evaluate("window.__stayed = true")


def assert_no_reload(page) -> None:
    assert page.evaluate("window.__stayed === true"), "the page reloaded instead of swapping a fragment"


def test_approve_an_approval_and_see_the_mission_become_ready(page, open_page, login, alice):
    mission, approval = waiting_on_approval(alice)
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    expect(page.locator("#mission-status")).to_have_text("Waiting for approval")
    expect(page.locator("#inbox-count")).to_have_attribute("data-count", "1")
    mark_page(page)
    card = page.get_by_role("article", name="deploy to production")
    expect(card).to_contain_text("Deploying changes the public site.")
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#mission-status")).to_have_text("Ready")
    expect(page.locator("#mission-sentence")).to_have_text("Ready to resume from the last checkpoint.")
    expect(page.locator("#inbox-count")).to_have_attribute("data-count", "0")
    assert_no_reload(page)
    approval.refresh_from_db()
    assert approval.status == "approved"


def test_edit_and_approve_refuses_invalid_json_then_sends_valid_json(page, open_page, login, alice):
    mission, approval = waiting_on_approval(alice)
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    mark_page(page)
    payload = page.get_by_label("Payload (JSON)")
    payload.fill('{"environment": "staging", ')
    page.get_by_role("button", name="Edit and approve").click()
    expect(page.get_by_role("alert")).to_contain_text("The payload is not valid JSON")
    expect(page.get_by_label("Payload (JSON)")).to_have_value('{"environment": "staging", ')
    expect(page.locator("#mission-status")).to_have_text("Waiting for approval")
    approval.refresh_from_db()
    assert approval.status == "pending" and approval.decided_payload is None

    page.get_by_label("Payload (JSON)").fill('{"environment": "staging", "version": "1.3"}')
    page.get_by_role("button", name="Edit and approve").click()
    expect(page.locator("#mission-status")).to_have_text("Ready")
    assert_no_reload(page)
    approval.refresh_from_db()
    assert approval.status == "edited"
    assert approval.decided_payload == {"environment": "staging", "version": "1.3"}
    page.get_by_text("Decided approvals (1)").click()
    expect(page.locator(".decided")).to_contain_text(json.dumps("1.3"))


def test_the_inbox_count_drops_after_each_decision(page, open_page, login, alice):
    agent = agent_for(alice)
    waiting_on_approval(alice, "First quest", action="deploy to production", agent=agent)
    waiting_on_approval(alice, "Second quest", action="email the client", agent=agent)
    login(alice)
    open_page("/approvals/")
    count = page.locator("#inbox-count")
    expect(count).to_have_attribute("data-count", "2")
    mark_page(page)
    page.get_by_role("article", name="deploy to production").get_by_role("button", name="Approve", exact=True).click()
    expect(count).to_have_attribute("data-count", "1")
    expect(page.get_by_role("article", name="deploy to production")).to_have_count(0)
    second = page.get_by_role("article", name="email the client")
    second.get_by_label("Note for the agent").fill("Not before Friday.")
    second.get_by_role("button", name="Reject").click()
    expect(count).to_have_attribute("data-count", "0")
    expect(page.get_by_role("heading", name="Inbox zero")).to_be_visible()
    assert_no_reload(page)
    assert Approval.objects.get(action="email the client").note == "Not before Friday."


def test_always_approve_in_the_inbox_then_revoke_it_on_the_quest_page(page, open_page, login, alice):
    mission, approval = waiting_on_approval(alice)
    login(alice)
    open_page("/approvals/")
    card = page.get_by_role("article", name="deploy to production")
    card.get_by_label("Always, for every call of deploy to production in this quest").check()
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(page.get_by_role("article", name="deploy to production")).to_have_count(0)

    open_page(f"/missions/{mission.pk}/")
    standing = page.locator("#standing-decisions")
    expect(standing).to_contain_text("Always approve deploy to production")
    mark_page(page)
    standing.get_by_role("button", name="Revoke “Always approve deploy to production”").click()
    expect(page.locator("#standing-decisions")).to_contain_text("Revoked")
    assert_no_reload(page)
    approval.refresh_from_db()
    assert (approval.status, approval.always) == ("approved", True)
