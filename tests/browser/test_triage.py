"""The inbox from the keyboard alone, in Chromium at desktop and phone width: j / k move between
items, a approves, r opens the note and Ctrl+Enter rejects with it; and the filter by quest."""

import pytest
from playwright.sync_api import expect

from quests.models import Approval, Milestone
from tests.browser.test_undo import WIDTHS, shot
from tests.builders import agent_for, waiting_on_approval, waiting_on_gate

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", WIDTHS, ids=list(WIDTHS))
def test_triage_the_inbox_from_the_keyboard(page, open_page, login, alice, width):
    page.set_viewport_size(WIDTHS[width])
    agent = agent_for(alice)
    _, deploy = waiting_on_approval(alice, "Ship the pricing page", action="deploy to production", agent=agent)
    _, email = waiting_on_approval(alice, "Tell the client", action="email the client", agent=agent)
    _, gate = waiting_on_gate(alice, "Plan the offsite", agent=agent)
    login(alice)
    open_page("/approvals/")
    first = page.get_by_role("article", name="deploy to production")
    second = page.get_by_role("article", name="email the client")
    third = page.get_by_role("article", name="Venues shortlisted")

    first.focus()
    page.keyboard.press("j")
    expect(second).to_be_focused()
    page.keyboard.press("j")
    expect(third).to_be_focused()
    page.keyboard.press("k")
    expect(second).to_be_focused()

    # r: the note; typing there is text, not keys (the "a" and "j" below are letters of the note).
    page.keyboard.press("r")
    expect(second.get_by_label("Note for the agent")).to_be_focused()
    page.keyboard.type("Not before Friday, ask again then.")
    page.keyboard.press("Control+Enter")
    expect(page.locator("#just-decided")).to_contain_text("You rejected “email the client”.")
    expect(third).to_be_focused()
    shot(page, f"triage-rejected-{width}")

    page.keyboard.press("k")
    expect(first).to_be_focused()
    page.keyboard.press("a")
    expect(page.locator("#just-decided li").first).to_contain_text("You approved “deploy to production”.")
    expect(third).to_be_focused()
    page.keyboard.press("a")
    expect(page.locator("#just-decided li").first).to_contain_text("You approved the milestone “Venues shortlisted”.")
    expect(page.get_by_role("heading", name="Inbox zero")).to_be_visible()
    shot(page, f"triage-done-{width}")

    assert Approval.objects.get(pk=email.pk).note == "Not before Friday, ask again then."
    assert Approval.objects.get(pk=email.pk).status == "rejected"
    assert Approval.objects.get(pk=deploy.pk).status == "approved"
    assert Milestone.objects.get(pk=gate.pk).review_status == "approved"


@pytest.mark.parametrize("width", WIDTHS, ids=list(WIDTHS))
def test_narrow_the_inbox_to_one_quest(page, open_page, login, alice, width):
    page.set_viewport_size(WIDTHS[width])
    agent = agent_for(alice)
    waiting_on_approval(alice, "Ship the pricing page", agent=agent)
    mission, _ = waiting_on_approval(alice, "Tell the client", action="email the client", agent=agent)
    login(alice)
    open_page("/approvals/")
    page.get_by_label("Quest", exact=True).select_option(label=f"Tell the client (quest {mission.pk})")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("article")).to_have_count(1)
    expect(page.get_by_role("article", name="email the client")).to_be_visible()
    shot(page, f"inbox-narrowed-{width}")
