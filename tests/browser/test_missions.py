"""Milestones and mission controls in a real browser: correct, pause and resume, cancel,
restore to the last verified checkpoint, live progress, and the same actions without JavaScript."""

import pytest
from playwright.sync_api import expect

from checkpoints.models import Record
from quests.models import Constraint, Mission
from quests.services import missions
from tests.builders import person, running, verified_then_more_work, waiting_on_gate

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_correct_a_milestone_and_see_the_constraint_appear(page, open_page, login, alice):
    mission, milestone = waiting_on_gate(alice)
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    card = page.get_by_role("article", name="Venues shortlisted")
    card.get_by_label("Correction").fill("Only venues with step-free access")
    card.get_by_role("button", name="Correct").click()
    constraints = page.locator("#constraints")
    expect(constraints).to_contain_text("Only venues with step-free access")
    expect(constraints).to_contain_text("From your correction")
    expect(page.locator("#mission-status")).to_have_text("Ready")
    assert Constraint.objects.filter(mission=mission, text="Only venues with step-free access", source="correction").exists()


def test_pause_and_resume(page, open_page, login, alice):
    mission, run = running(alice)
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    expect(page.locator("#mission-status")).to_have_text("Running")
    page.get_by_role("button", name="Pause", exact=True).click()
    expect(page.locator("#mission-status")).to_have_text("Paused")
    expect(page.locator("#mission-sentence")).to_have_text("Paused by you. Resume it when you are ready.")
    expect(page.get_by_role("button", name="Pause", exact=True)).to_have_count(0)
    page.get_by_role("button", name="Resume").click()
    expect(page.locator("#mission-status")).to_have_text("Ready")
    mission.refresh_from_db()
    run.refresh_from_db()
    assert mission.status == "ready" and run.stop_reason == "paused_by_user"


def test_cancel_asks_for_confirmation(page, open_page, login, alice):
    mission, _ = running(alice)
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    page.get_by_role("button", name="Cancel quest", exact=True).click()
    panel = page.locator("#cancel-confirm")
    expect(panel).to_contain_text("can be neither resumed nor restored")
    assert Mission.objects.get(pk=mission.pk).status == "running"
    panel.get_by_role("link", name="Keep it going").click()
    expect(page.locator("#cancel-confirm")).to_be_empty()
    expect(page.locator("#mission-status")).to_have_text("Running")
    page.get_by_role("button", name="Cancel quest", exact=True).click()
    page.get_by_role("button", name="Yes, cancel quest").click()
    expect(page.locator("#mission-status")).to_have_text("Cancelled")
    expect(page.locator("#mission-sentence")).to_have_text("Cancelled; nothing more will run.")
    assert Mission.objects.get(pk=mission.pk).status == "cancelled"


def test_restore_to_the_last_verified_checkpoint_and_see_the_tree_branch(page, open_page, login, alice):
    built = verified_then_more_work(alice)
    login(alice)
    open_page(f"/missions/{built.mission.pk}/")
    tree = page.locator("svg.tree")
    expect(tree).to_have_attribute("data-lanes", "1")
    expect(page.get_by_label("Roll back to")).to_have_value(str(built.verified_checkpoint_id))
    page.get_by_role("button", name="Restore", exact=True).click()
    confirm = page.locator("#restore-confirm")
    expect(confirm).to_contain_text("Kept")
    expect(confirm).to_contain_text("Set aside")
    expect(confirm).to_contain_text("operation ledger")
    page.get_by_role("button", name="Yes, restore").click()
    expect(page.locator("#mission-status")).to_have_text("Ready")
    expect(tree).to_have_attribute("data-lanes", "2")
    expect(page.locator("svg.tree circle.node.abandoned").first).to_be_visible()
    expect(page.locator("svg.tree circle.node.verified")).to_have_count(1)
    expect(page.locator("#ledger")).to_contain_text("PNR-7QX2")
    assert Record.objects.get(pk=built.later_decision_id).abandoned


def test_a_running_mission_follows_the_agent_by_polling(page, open_page, login, alice):
    mission, run = running(alice)
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    expect(page.locator("#mission-status")).to_have_text("Running")
    page.evaluate("window.__stayed = true")
    missions.mission_pause(actor=person(alice), mission_id=mission.pk)  # as if from another tab
    expect(page.locator("#mission-status")).to_have_text("Paused", timeout=10_000)
    assert page.evaluate("window.__stayed === true")
    expect(page.locator("#mission-body")).not_to_have_attribute("hx-trigger", "every 3s")


def test_actions_work_without_javascript(browser, live_server, alice):
    from django.test import Client

    mission, _ = waiting_on_gate(alice)
    context = browser.new_context(java_script_enabled=False)
    client = Client()
    client.force_login(alice)
    context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}])
    page = context.new_page()
    page.goto(f"{live_server.url}/missions/{mission.pk}/")
    page.get_by_role("article", name="Venues shortlisted").get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#mission-status")).to_have_text("Ready")
    page.get_by_role("button", name="Cancel quest", exact=True).click()
    expect(page.get_by_role("heading", name=f"Cancel “{mission.title}”?")).to_be_visible()
    page.get_by_role("button", name="Yes, cancel quest").click()
    expect(page).to_have_url(f"{live_server.url}/missions/{mission.pk}/")
    expect(page.locator("#mission-status")).to_have_text("Cancelled")
    context.close()
