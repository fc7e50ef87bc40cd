"""Issue 23, the person's side, in Chromium at a desktop and a phone width: a decision sent after
logging out elsewhere, the API docs page under the Content Security Policy, the mission page's
ledger with receipts, the checkpoint picture of a short history, the correction rule, times in
an emulated time zone, and the inbox's order. axe-core scans each new state."""

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from checkpoints.models import Checkpoint, Operation
from quests.models import Approval, Constraint, ConstraintSource
from quests.services import milestones, records, runs
from tests.browser.test_accessibility import assert_no_violations
from tests.builders import agent_for, running, waiting_on_approval, waiting_on_gate

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
# Screenshots to look at the layout with an image viewer; not compared automatically.
SHOTS = Path(tempfile.gettempdir()) / "questlog-screenshots"


@pytest.fixture(params=list(WIDTHS))
def width(request, page):
    page.set_viewport_size(WIDTHS[request.param])
    return request.param


def shot(page_or_element, name: str, width: str) -> None:
    SHOTS.mkdir(exist_ok=True)
    options = {"full_page": True} if hasattr(page_or_element, "goto") else {}
    page_or_element.screenshot(path=str(SHOTS / f"{name}-{width}.png"), **options)


def log_in_with_the_form(page) -> None:
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-password")
    page.get_by_role("button", name="Log in").click()


# --- 1. A decision after the session ended -----------------------------------------------------------


def test_a_decision_after_logging_out_in_another_tab_leads_to_the_login_and_back_to_make_it_again(page, context, open_page, login, alice, width):
    mission, approval = waiting_on_approval(alice)
    login(alice)
    open_page("/approvals/")
    page.get_by_label("Note for the agent").fill("Only after 18:00")
    other = context.new_page()
    other.goto(page.url)
    other.get_by_role("button", name="Log out").click()
    # The session has ended once the other tab shows the login page. Closing the tab before its
    # navigation committed also hangs Chromium's close for good (crbug.com/536385539): `close`
    # answered, the tab never went, and the test waited until pytest-timeout's 10 minutes.
    other.wait_for_url("**/accounts/login/**")
    other.wait_for_load_state()
    other.close()
    page.get_by_role("button", name="Approve", exact=True).click()
    # A whole page, not the login page nested inside the inbox.
    page.wait_for_url("**/accounts/login/?next=%2Fapprovals%2F")
    expect(page.locator("header.top")).to_have_count(1)
    expect(page.get_by_text("what you just sent was not applied")).to_be_visible()
    assert_no_violations(page)
    shot(page, "session-ended-login", width)
    log_in_with_the_form(page)
    page.wait_for_url("**/approvals/")
    card = page.locator(f"#approval-{approval.pk}")
    expect(card.get_by_role("alert")).to_contain_text("your “Approve” was not applied and nothing changed")
    expect(card.get_by_label("Note for the agent")).to_have_value("Only after 18:00")
    expect(page.get_by_role("button", name="Log out")).to_contain_text("alice")
    assert_no_violations(page)
    shot(page, "session-ended-back", width)
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator(f"#approval-{approval.pk}")).to_have_count(0)
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.note == "Only after 18:00"


# --- 2. The API docs --------------------------------------------------------------------------------


def test_the_api_docs_page_lists_the_operations_under_the_content_security_policy(page, open_page, width):
    blocked = []
    page.on("console", lambda message: blocked.append(message.text) if "Content Security Policy" in message.text else None)
    response = open_page("/api/v1/docs")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    expect(page.locator(".opblock").first).to_be_visible(timeout=15000)
    assert page.locator(".opblock").count() > 30
    expect(page.get_by_text("/api/v1/missions/{mission_id}/runs").first).to_be_visible()
    assert not blocked, blocked
    assert not page.locator("script[src^='http'], link[href^='http']").count()
    shot(page, "api-docs", width)


# --- 3. The mission page's ledger ------------------------------------------------------------------------


def test_the_mission_pages_ledger_keeps_its_columns_with_long_receipts_and_external_ids(page, open_page, login, alice, width):
    mission, run = running(alice)
    long_receipt = {
        "message_id": "<CAF=k3Ykq1s8b0v2Zx9mQ7wL4pR6tN8uD5eG3hJ1aB2cC4dE6fG8hI0jK@mail.example.com>",
        "accepted_recipients": ["alice@example.com", "bob@example.com", "carol@example.com"],
        "provider_response": "250 2.0.0 OK 1733245383 d75a77b69052e-46692a8b5f6si123456 - gsmtp " * 3,
    }
    Operation.objects.bulk_create(
        Operation(
            mission=mission,
            key=f"send-invite-{n}-2026-12-03T17:30:00Z-to-the-whole-team",
            request_hash="0" * 64,
            kind="email.send",
            target="team-offsite-2026@lists.example.com",
            status="completed",
            attempts=1,
            external_id=f"0100019384ab6c7d-1f2e3d4c-5b6a-7988-a1b2-c3d4e5f6a7b8-00000{n}",
            receipt=long_receipt,
        )
        for n in range(3)
    )
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    table = page.locator("#ledger table")
    expect(table).to_be_visible()
    rows = table.locator("tbody tr")
    shot(page.locator("#ledger"), "mission-ledger", width)
    for i in range(rows.count()):
        # A long receipt makes a long card on a phone, never a sliver of a column.
        tallest = 420 if width == "desktop" else 900
        assert rows.nth(i).bounding_box()["height"] < tallest, f"row {i} is {rows.nth(i).bounding_box()['height']} px tall"
    if width == "desktop":
        for header in table.locator("th").all():
            fits = header.evaluate("th => th.scrollWidth <= th.clientWidth + 1")
            assert fits, f"the header {header.inner_text()!r} is cut"
        receipt = table.locator("th", has_text="Receipt").bounding_box()
        assert receipt["width"] >= 280, f"the Receipt column is {receipt['width']} px wide"
        # The whole table is in view: nothing to scroll sideways to.
        assert receipt["x"] + receipt["width"] <= page.locator("#ledger").bounding_box()["x"] + page.locator("#ledger").bounding_box()["width"]
    else:
        # A card per operation: each value has the card's width, not a sliver.
        cell = rows.first.locator("td[data-label='Receipt']")
        assert cell.bounding_box()["width"] > 300
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTHS[width]["width"]
    assert_no_violations(page)


# --- 4. The checkpoint picture of a short history ---------------------------------------------------------


def test_the_checkpoint_picture_of_a_short_history_shows_the_current_checkpoint_at_every_width(page, open_page, login, alice, width):
    agent = agent_for(alice)
    mission, run = running(alice, agent=agent)
    for step in range(4):
        records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": step})
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external", detail="Waiting for the venue")
    head = Checkpoint.objects.filter(mission=mission).order_by("-seq").first()
    assert Checkpoint.objects.filter(mission=mission).count() == 5
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    wrap = page.locator(".tree-wrap")
    current = page.locator(f"svg.tree circle[data-seq='{head.seq}']")
    box, dot = wrap.bounding_box(), current.bounding_box()
    assert box["x"] <= dot["x"] and dot["x"] + dot["width"] <= box["x"] + box["width"], (box, dot)
    # Every dot of the five is in view too: the picture is short enough.
    for circle in page.locator("svg.tree circle[data-seq]").all():
        seen = circle.bounding_box()
        assert box["x"] <= seen["x"] and seen["x"] + seen["width"] <= box["x"] + box["width"]
    assert_no_violations(page)
    shot(wrap, "short-history", width)


# --- 5. The correction rule ----------------------------------------------------------------------------


def test_approving_a_milestone_with_a_correction_binds_the_agent(page, open_page, login, alice, width):
    mission, milestone = waiting_on_gate(alice)
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    item = page.locator(f"#milestone-{milestone.pk}")
    expect(item.get_by_text("becomes a constraint the agent must follow, whichever button you press")).to_be_visible()
    field = item.get_by_label("Correction")
    field.fill("Keep the venue within 30 minutes of the airport")
    expect(item.locator(".counter")).to_have_text("47 of 2,000 characters.")
    assert field.get_attribute("maxlength") == "2000"
    item.get_by_role("button", name="Approve").click()
    expect(page.locator("#constraints")).to_contain_text("Keep the venue within 30 minutes of the airport")
    expect(page.locator(f"#milestone-{milestone.pk}")).to_contain_text("a constraint the agent follows")
    assert Constraint.objects.filter(mission=mission, source=ConstraintSource.CORRECTION).count() == 1
    assert_no_violations(page)
    shot(page, "approved-with-correction", width)


# --- 8. Times in the person's zone ----------------------------------------------------------------------


def test_times_show_in_the_browsers_time_zone_with_its_name(browser, live_server, alice, width):
    mission, approval = waiting_on_approval(alice)
    Approval.objects.filter(pk=approval.pk).update(respond_by=datetime(2030, 12, 3, 19, 3, tzinfo=UTC))
    context = browser.new_context(timezone_id="America/Los_Angeles", viewport=WIDTHS[width])
    page = context.new_page()
    page.goto(live_server.url + "/accounts/login/")
    log_in_with_the_form(page)
    page.goto(live_server.url + "/approvals/")
    expires = page.locator(f"#approval-{approval.pk} time[datetime='2030-12-03T19:03:00+00:00']")
    expect(expires).to_have_text("Dec 3, 2030, 11:03 PST")
    expect(page.locator(f"#approval-{approval.pk} time").first).to_have_text("just now")
    assert_no_violations(page)
    # The person's own choice wins over the browser's.
    page.goto(live_server.url + "/settings/")
    expect(page.get_by_label("Time zone")).to_have_value("")
    expect(page.get_by_role("option", name="Your browser’s (America/Los_Angeles)")).to_be_attached()
    assert_no_violations(page)
    page.get_by_label("Time zone").select_option("Europe/Lisbon")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Times are now shown in Europe/Lisbon.")).to_be_visible()
    page.goto(live_server.url + "/approvals/")
    expect(expires).to_have_text("Dec 3, 2030, 19:03 WET")
    context.close()


# --- 7. The inbox's order ---------------------------------------------------------------------------------


def test_the_inbox_lists_what_blocks_an_agent_first_then_by_deadline(page, open_page, login, alice, width):
    agent = agent_for(alice)
    quiet, run = running(alice, "Progress only", agent=agent)
    milestones.milestone_claim(actor=agent, run_id=run.pk, kind="custom", title="A progress note", gate=False)
    waiting_on_gate(alice, "Gate quest", agent=agent)
    _, late = waiting_on_approval(alice, "Late quest", action="send the late email", agent=agent)
    _, soon = waiting_on_approval(alice, "Soon quest", action="send the urgent email", agent=agent)
    Approval.objects.filter(pk=late.pk).update(respond_by=timezone.now() + timedelta(days=2))
    Approval.objects.filter(pk=soon.pk).update(respond_by=timezone.now() + timedelta(hours=1))
    login(alice)
    open_page("/approvals/")
    titles = page.locator("#inbox article h3").all_inner_texts()
    assert [t.split("\n")[-1] for t in titles] == ["send the urgent email", "send the late email", "Venues shortlisted", "A progress note"]
    assert_no_violations(page)
    shot(page, "inbox-order", width)
