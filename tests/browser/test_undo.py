"""Deciding from the inbox in Chromium, at desktop and phone width: the confirmation says what
happened and links the quest, focus moves on to the next item, and Undo puts the item back."""

import os

import pytest
from playwright.sync_api import expect

from quests.models import Approval
from tests.builders import agent_for, waiting_on_approval

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
# Set to a folder to keep what the tests saw (they are looked at while the pages are built).
SHOTS = os.environ.get("QUESTLOG_TEST_SHOTS")


def shot(page, name: str) -> None:
    if SHOTS:
        page.screenshot(path=f"{SHOTS}/{name}.png", full_page=True)


@pytest.mark.parametrize("width", WIDTHS, ids=list(WIDTHS))
def test_approve_confirm_move_on_then_undo(page, open_page, login, alice, width):
    page.set_viewport_size(WIDTHS[width])
    agent = agent_for(alice)
    first_mission, first = waiting_on_approval(alice, "Ship the pricing page", action="deploy to production", agent=agent)
    waiting_on_approval(alice, "Tell the client", action="email the client", agent=agent)
    login(alice)
    open_page("/approvals/")
    page.get_by_role("article", name="deploy to production").get_by_role("button", name="Approve", exact=True).click()

    confirmation = page.locator("#just-decided li").first
    expect(confirmation).to_contain_text("You approved “deploy to production”.")
    expect(confirmation.get_by_role("link", name="Ship the pricing page")).to_have_attribute("href", f"/missions/{first_mission.pk}/")
    expect(page.get_by_role("article", name="deploy to production")).to_have_count(0)
    # Focus went on to the next item, not to the top of the page.
    expect(page.get_by_role("article", name="email the client")).to_be_focused()
    expect(page.locator("#live-announcer")).to_have_text("You approved “deploy to production”.")
    expect(page.locator("#inbox-count")).to_have_attribute("data-count", "1")
    shot(page, f"undo-offered-{width}")

    confirmation.get_by_role("button", name="Undo").click()
    restored = page.get_by_role("article", name="deploy to production")
    expect(restored).to_be_focused()
    expect(page.locator("#just-decided")).to_have_count(0)
    expect(page.locator("#live-announcer")).to_have_text("Undone: “deploy to production” waits for your decision again.")
    expect(page.locator("#inbox-count")).to_have_attribute("data-count", "2")
    shot(page, f"undone-{width}")
    first.refresh_from_db()
    first_mission.refresh_from_db()
    assert first.status == "pending" and first_mission.status == "waiting_for_approval"


@pytest.mark.parametrize("width", WIDTHS, ids=list(WIDTHS))
def test_undo_after_the_agent_started_is_refused_with_a_reason(page, open_page, login, alice, width):
    from quests.services import runs

    page.set_viewport_size(WIDTHS[width])
    agent = agent_for(alice)
    mission, approval = waiting_on_approval(alice, agent=agent)
    login(alice)
    open_page("/approvals/")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#just-decided")).to_contain_text("You approved")
    runs.run_start(actor=agent, mission_id=mission.pk)
    page.get_by_role("button", name="Undo").click()
    expect(page.get_by_role("alert")).to_contain_text("the agent has already started a run")
    expect(page.get_by_role("alert")).to_be_focused()
    shot(page, f"undo-refused-{width}")
    assert Approval.objects.get(pk=approval.pk).status == "approved"


def test_the_undo_button_goes_when_its_time_is_up(page, open_page, login, alice, settings):
    settings.QUESTLOG_UNDO_SECONDS = 2
    waiting_on_approval(alice)
    login(alice)
    open_page("/approvals/")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.get_by_role("button", name="Undo")).to_be_visible()
    expect(page.get_by_role("button", name="Undo")).to_have_count(0, timeout=5000)
    expect(page.locator("#just-decided")).to_contain_text("You approved")


@pytest.mark.parametrize("width", WIDTHS, ids=list(WIDTHS))
def test_undo_on_the_quest_page(page, open_page, login, alice, width):
    page.set_viewport_size(WIDTHS[width])
    mission, approval = waiting_on_approval(alice)
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    page.get_by_role("article", name="deploy to production").get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#mission-status")).to_have_text("Ready")
    expect(page.locator("#just-decided")).to_contain_text("You approved “deploy to production”.")
    shot(page, f"undo-mission-{width}")
    page.get_by_role("button", name="Undo").click()
    expect(page.locator("#mission-status")).to_have_text("Waiting for approval")
    expect(page.get_by_role("article", name="deploy to production")).to_be_focused()
    approval.refresh_from_db()
    assert approval.status == "pending"
