"""The Content Security Policy in real Chromium: the pages and what htmx swaps into them run with no
inline script or style, so the browser reports no violation; a deliberate one is reported, so the
listener would have seen any."""

import re

import pytest
from playwright.sync_api import expect

from tests.builders import running, waiting_on_approval, waiting_on_gate

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

VIOLATION = re.compile(r"Content Security Policy|Refused to (execute|apply|load|evaluate|frame|connect)", re.I)


@pytest.fixture
def violations(page) -> list[str]:
    """Console messages and page errors that speak of the policy, as Chromium reports them."""
    seen: list[str] = []
    page.on("console", lambda message: seen.append(message.text) if VIOLATION.search(message.text) else None)
    page.on("pageerror", lambda error: seen.append(str(error)))
    return seen


def test_the_board_and_the_mission_page_run_under_the_policy_without_a_violation(page, open_page, login, alice, violations):
    mission, _ = running(alice, "Write the report")
    waiting_on_gate(alice, "Plan the offsite")
    login(alice)
    board = open_page("/")
    assert "script-src 'self'" in board.headers["content-security-policy"]
    expect(page.get_by_text("Write the report")).to_be_visible()
    open_page(f"/missions/{mission.pk}/")
    expect(page.locator("#mission-status")).to_have_text("Running")
    # htmx at work under the policy: a swap from a button, then the page's own polling.
    page.get_by_role("button", name="Pause", exact=True).click()
    expect(page.locator("#mission-status")).to_have_text("Paused")
    page.get_by_role("button", name="Resume").click()
    expect(page.locator("#mission-status")).to_have_text("Ready")
    assert violations == []


def test_the_inbox_tokens_and_login_pages_run_under_the_policy_without_a_violation(page, open_page, login, alice, violations):
    waiting_on_approval(alice)
    login(alice)
    open_page("/approvals/")
    open_page("/tokens/")
    page.get_by_label("Name").first.fill("laptop agent")
    page.get_by_role("button", name=re.compile("Create", re.I)).click()
    field = page.get_by_label("Your new token")
    expect(field).to_be_visible()
    field.focus()  # selects the token, now from static/js/questlog.js rather than an inline handler
    assert (
        page.evaluate(
            "() => window.getSelection().toString() || document.activeElement.value.slice("
            "document.activeElement.selectionStart, document.activeElement.selectionEnd)"
        )
        == field.input_value()
    )
    page.context.clear_cookies()
    open_page("/accounts/login/")
    expect(page.get_by_label("Username")).to_be_visible()
    assert violations == []


def test_a_deliberate_inline_style_is_reported_so_the_listener_sees_violations(page, open_page, login, alice, violations):
    login(alice)
    open_page("/")
    page.evaluate("() => document.body.insertAdjacentHTML('beforeend', '<p style=\"color: red\">inline</p>')")
    page.wait_for_timeout(200)
    assert any("style" in text for text in violations), violations


def test_the_staff_pages_and_djangos_admin_run_under_the_policy_without_a_violation(page, open_page, login, django_user_model, violations):
    staff = django_user_model.objects.create_superuser("root", password="root-password")
    login(staff)
    for path in ("/staff/retention/", "/admin/", "/admin/quests/retentionpolicy/", "/admin/auth/user/"):
        assert open_page(path).status == 200, path
        page.wait_for_load_state("load")
    assert violations == []
