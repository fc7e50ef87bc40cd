"""axe-core (bundled by axe-playwright-python) on every page people use, in Chromium, in the states
people meet them in: 0 violations of any rule axe runs by default (WCAG A and AA, and its best
practices). Each scan is one row of SCANS (a page route and a state built by a function); the
route list comes from Django's URL resolver, so a new page with no row, and no reason in
NOT_SCANNED, fails test_every_html_page_route_is_scanned."""

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.urls import resolve
from playwright.sync_api import Page, expect

from checkpoints.models import Checkpoint
from quests.models import Hold, Mission
from quests.services import approvals, memory, milestones, missions, runs
from quests.services.tokens import token_create
from tests.builders import (
    agent_for,
    ledger_of,
    new_mission,
    person,
    running,
    verified_then_more_work,
    waiting_on_approval,
    waiting_on_gate,
)
from tests.test_authorization_matrix import EXPECTED, page_routes

AXE = Axe()
PHONE = {"width": 390, "height": 844}
TOKEN_NAME = re.compile(r"^Name")  # "Name (which agent uses it)"


def violations_report(results) -> str:
    """One block per violation: the rule, what it asks, and every element that breaks it."""
    lines = []
    for violation in results.response["violations"]:
        lines.append(f"{violation['id']} ({violation['impact']}): {violation['help']} — {violation['helpUrl']}")
        for node in violation["nodes"]:
            lines.append(f"    at {', '.join(map(str, node['target']))}: {node['html'][:200]}")
            lines.append(f"       {node['failureSummary']}".replace("\n", " "))
    return "\n".join(lines)


def assert_no_violations(page: Page) -> None:
    results = AXE.run(page)
    assert results.violations_count == 0, f"axe-core on {page.url}:\n{violations_report(results)}"


# --- The states -------------------------------------------------------------------------------------
# Each takes the test's World and leaves the page showing the state to scan.


@dataclass
class World:
    page: Page
    open_page: Callable
    login: Callable
    user: object
    staff: object


def signed_in(world: World, path: str, user=None):
    world.login(user or world.user)
    response = world.open_page(path)
    world.page.wait_for_load_state("load")
    return response


def board_empty(world):
    signed_in(world, "/")


def board_with_quests(world):
    running(world.user, "Write the report")
    waiting_on_gate(world.user)
    waiting_on_approval(world.user)
    cancelled = new_mission(world.user, "Old quest")
    missions.mission_cancel(actor=person(world.user), mission_id=cancelled.pk)
    signed_in(world, "/")


def board_filtered(world):
    running(world.user, "Write the report")
    waiting_on_gate(world.user)
    signed_in(world, "/?status=running")


def board_searched_with_no_result(world):
    running(world.user, "Write the report")
    signed_in(world, "/?q=nothing+matches+this")


def board_page_two(world):
    Mission.objects.bulk_create(Mission(owner=world.user, title=f"Quest {n}", objective=f"Objective {n}") for n in range(30))
    signed_in(world, "/?page=2")


def mission_running_then_waiting_on_you(world):
    """Running with a milestone awaiting review (scanned), then also an approval pending."""
    agent = agent_for(world.user)
    mission, run = running(world.user, agent=agent)
    milestones.milestone_claim(
        actor=agent,
        run_id=run.pk,
        kind="research_complete",
        title="Venues shortlisted",
        summary="Two venues under budget.",
        gate=False,
        agent_state={"step": "plan"},
    )
    signed_in(world, f"/missions/{mission.pk}/")
    expect(world.page.locator("#mission-status")).to_have_text("Running")
    assert_no_violations(world.page)
    approvals.approval_request(
        actor=agent,
        run_id=run.pk,
        action="deploy to production",
        payload={"environment": "production"},
        reason="Deploying changes the public site.",
    )
    world.open_page(f"/missions/{mission.pk}/")
    expect(world.page.get_by_role("article", name="deploy to production")).to_be_visible()


def mission_paused(world):
    mission, _ = running(world.user)
    missions.mission_pause(actor=person(world.user), mission_id=mission.pk)
    signed_in(world, f"/missions/{mission.pk}/")


def mission_completed(world):
    agent = agent_for(world.user)
    mission, run = running(world.user, agent=agent)
    runs.run_stop(actor=agent, run_id=run.pk, reason="completed")
    signed_in(world, f"/missions/{mission.pk}/")


def mission_cancelled(world):
    mission, _ = running(world.user)
    missions.mission_cancel(actor=person(world.user), mission_id=mission.pk)
    signed_in(world, f"/missions/{mission.pk}/")


def mission_with_branches(world):
    built = verified_then_more_work(world.user)
    missions.mission_restore(actor=person(world.user), mission_id=built.mission.pk, checkpoint_id=built.verified_checkpoint_id)
    signed_in(world, f"/missions/{built.mission.pk}/")
    expect(world.page.locator("svg.tree")).to_have_attribute("data-lanes", "2")


def mission_with_a_form_error(world):
    mission, _ = waiting_on_gate(world.user)
    signed_in(world, f"/missions/{mission.pk}/")
    world.page.get_by_label("New constraint").fill("   ")
    world.page.get_by_role("button", name="Add constraint").press("Enter")
    expect(world.page.get_by_role("alert")).to_contain_text("Write the constraint first")


def mission_at_phone_width(world):
    world.page.set_viewport_size(PHONE)
    built = verified_then_more_work(world.user)
    signed_in(world, f"/missions/{built.mission.pk}/")


def board_at_phone_width(world):
    world.page.set_viewport_size(PHONE)
    board_with_quests(world)


def ledger_page(world):
    mission, _ = running(world.user, "Send the invitations")
    ledger_of(mission, completed=55, attempted=1, failed=1, planned=1)
    signed_in(world, f"/missions/{mission.pk}/ledger/")
    expect(world.page.get_by_role("navigation", name="Pages of the ledger")).to_be_visible()


def checkpoint_with_a_diff(world):
    built = verified_then_more_work(world.user)
    latest = Checkpoint.objects.filter(mission=built.mission).latest("seq")
    signed_in(world, f"/checkpoints/{latest.pk}/")


def inbox_empty(world):
    signed_in(world, "/approvals/")


def inbox_full(world):
    agent = agent_for(world.user)
    waiting_on_approval(world.user, "First quest", agent=agent)
    waiting_on_approval(world.user, "Second quest", action="email the client", agent=agent)
    waiting_on_gate(world.user, agent=agent)
    signed_in(world, "/approvals/")


def inbox_just_decided(world):
    """A decision confirmed (with Undo), a rejection refused for want of a note, focus moved on."""
    inbox_full(world)
    world.page.get_by_role("article", name="deploy to production").get_by_role("button", name="Approve", exact=True).press("Enter")
    expect(world.page.get_by_role("button", name="Undo")).to_be_visible()
    world.page.get_by_role("article", name="email the client").get_by_role("button", name="Reject").press("Enter")
    expect(world.page.get_by_role("alert")).to_contain_text("Say why you reject it")


def inbox_just_decided_at_phone_width(world):
    world.page.set_viewport_size(PHONE)
    inbox_just_decided(world)


def inbox_undo_refused(world):
    agent = agent_for(world.user)
    mission, _ = waiting_on_approval(world.user, agent=agent)
    signed_in(world, "/approvals/")
    world.page.get_by_role("button", name="Approve", exact=True).press("Enter")
    expect(world.page.get_by_role("button", name="Undo")).to_be_visible()
    runs.run_start(actor=agent, mission_id=mission.pk)
    world.page.get_by_role("button", name="Undo").press("Enter")
    expect(world.page.get_by_role("alert")).to_contain_text("already started a run")


def inbox_narrowed(world):
    agent = agent_for(world.user)
    mission, _ = waiting_on_approval(world.user, "First quest", agent=agent)
    waiting_on_gate(world.user, agent=agent)
    signed_in(world, f"/approvals/?quest={mission.pk}&kind=milestone")
    expect(world.page.get_by_text("Nothing that matches waits for you.")).to_be_visible()


def memory_page(world):
    agent = agent_for(world.user)
    _, run = running(world.user, agent=agent)
    kept, _ = memory.memory_propose(actor=agent, run_id=run.pk, name="timezone", value="Europe/Lisbon", reason="Meetings")
    memory.memory_decide(actor=person(world.user), proposal_id=kept.pk, decision="approve")
    memory.memory_propose(actor=agent, run_id=run.pk, name="tone", value="Plain English", reason="Emails")
    signed_in(world, "/memory/")


def tokens_empty(world):
    signed_in(world, "/tokens/")


def tokens_with_a_new_token(world):
    token_create(user=world.user, name="laptop agent")
    revoked, _ = token_create(user=world.user, name="old agent")
    revoked.revoked_at = revoked.created_at
    revoked.save(update_fields=["revoked_at"])
    new_mission(world.user)
    signed_in(world, "/tokens/")
    world.page.get_by_label(TOKEN_NAME).fill("server agent")
    world.page.get_by_role("button", name="Create token").press("Enter")
    expect(world.page.get_by_label("Your new token")).to_be_visible()


def tokens_with_a_form_error(world):
    signed_in(world, "/tokens/")
    world.page.get_by_label(TOKEN_NAME).fill("   ")
    world.page.get_by_role("button", name="Create token").press("Enter")
    expect(world.page.get_by_role("alert")).to_contain_text("Give the token a name")


def login_page(world):
    world.open_page("/accounts/login/")


def login_with_an_error(world):
    world.open_page("/accounts/login/")
    world.page.get_by_label("Username").fill(world.user.get_username())
    world.page.get_by_label("Password").fill("not the password")
    world.page.get_by_role("button", name="Log in").press("Enter")
    expect(world.page.locator(".error, [role=alert]").first).to_be_visible()


def staff_retention(world):
    mission = new_mission(world.user)
    Hold.objects.create(mission=mission, reason="Legal review", placed_by=world.staff)
    signed_in(world, "/staff/retention/", world.staff)


def staff_retention_zero_grace(world):
    """A grace period of 0 days sent: the form asks for the confirmation."""
    signed_in(world, "/staff/retention/", world.staff)
    world.page.get_by_label("Grace period after a quest ends (days)").fill("0")
    world.page.get_by_role("button", name="Save policy").press("Enter")
    expect(world.page.get_by_label("Yes, delete a quest's working state as soon as the quest ends")).to_be_visible()


def cancel_confirmation(world):
    mission, _ = running(world.user)
    signed_in(world, f"/missions/{mission.pk}/cancel/")
    expect(world.page.get_by_role("button", name="Yes, cancel quest")).to_be_visible()


def restore_confirmation(world):
    built = verified_then_more_work(world.user)
    signed_in(world, f"/missions/{built.mission.pk}/restore/?checkpoint={built.verified_checkpoint_id}")
    expect(world.page.get_by_role("button", name="Yes, restore")).to_be_visible()


def restore_without_a_checkpoint(world):
    """The plain GET with nothing chosen: the mission page with the form's error (422)."""
    built = verified_then_more_work(world.user)
    assert signed_in(world, f"/missions/{built.mission.pk}/restore/").status == 422
    expect(world.page.get_by_role("alert")).to_contain_text("Choose one")


def mission_with_the_confirmations_open(world):
    """The cancel and restore panels htmx swaps into the mission page (under its h1, not a page's)."""
    built = verified_then_more_work(world.user)
    signed_in(world, f"/missions/{built.mission.pk}/")
    world.page.get_by_role("button", name="Restore", exact=True).press("Enter")
    expect(world.page.get_by_role("button", name="Yes, restore")).to_be_visible()
    world.page.get_by_role("button", name="Cancel quest", exact=True).press("Enter")
    expect(world.page.get_by_role("button", name="Yes, cancel quest")).to_be_visible()


def tokens_at_phone_width(world):
    world.page.set_viewport_size(PHONE)
    token_create(user=world.user, name="laptop agent", mission=new_mission(world.user))
    signed_in(world, "/tokens/")


def inbox_at_phone_width(world):
    world.page.set_viewport_size(PHONE)
    inbox_full(world)


def delete_confirmation(world):
    mission = new_mission(world.user)
    missions.mission_cancel(actor=person(world.user), mission_id=mission.pk)
    signed_in(world, f"/missions/{mission.pk}/retention/delete/")


def settings_page(world):
    signed_in(world, "/settings/")


def settings_with_a_form_error(world):
    signed_in(world, "/settings/")
    # A zone the list does not offer, as a stale page or a crafted form would send it.
    world.page.evaluate(
        "() => { const o = document.createElement('option'); o.value = 'Mars/Olympus'; o.text = 'Mars'; document.getElementById('time-zone').append(o); }"
    )
    world.page.get_by_label("Time zone").select_option("Mars/Olympus")
    world.page.get_by_role("button", name="Save").click()
    expect(world.page.get_by_role("alert")).to_contain_text("is not a time zone we know")


def notifications_with_a_webhook_and_its_secret(world):
    signed_in(world, "/settings/notifications/")
    # A public address written as one: accepted without a DNS lookup.
    world.page.get_by_label("URL").fill("https://93.184.215.14/questlog")
    world.page.get_by_role("button", name="Add webhook").click()
    expect(world.page.get_by_label("Signing secret")).to_be_visible()


def notifications_with_a_form_error(world):
    signed_in(world, "/settings/notifications/")
    world.page.get_by_label("URL").fill("http://127.0.0.1/hook")
    world.page.get_by_role("button", name="Add webhook").click()
    expect(world.page.get_by_role("alert")).to_contain_text("loopback")


def unsubscribe_page(world):
    from notifications.sending import unsubscribe_url

    world.open_page(unsubscribe_url(world.user.pk, "mission.completed").removeprefix("http://localhost:8000"))
    expect(world.page.get_by_role("button", name="Unsubscribe")).to_be_visible()


def not_found(world):
    assert signed_in(world, "/missions/999999/").status == 404


@dataclass(frozen=True)
class Scan:
    route: str | None  # the URL conf's route the state is on; None: no route (the 404 page)
    state: Callable[[World], None]
    # The route the browser ends on when it differs: the page's form, refused, answers with the
    # page itself at the form's own address (a POST-only action route).
    landed: str | None = None

    @property
    def id(self) -> str:
        return self.state.__name__


SCANS = [
    Scan("", board_empty),
    Scan("", board_with_quests),
    Scan("", board_filtered),
    Scan("", board_searched_with_no_result),
    Scan("", board_page_two),
    Scan("", board_at_phone_width),
    Scan("missions/<int:pk>/", mission_running_then_waiting_on_you),
    Scan("missions/<int:pk>/", mission_paused),
    Scan("missions/<int:pk>/", mission_completed),
    Scan("missions/<int:pk>/", mission_cancelled),
    Scan("missions/<int:pk>/", mission_with_branches),
    Scan("missions/<int:pk>/", mission_with_a_form_error),
    Scan("missions/<int:pk>/", mission_at_phone_width),
    Scan("missions/<int:pk>/", mission_with_the_confirmations_open),
    Scan("missions/<int:pk>/ledger/", ledger_page),
    Scan("checkpoints/<int:pk>/", checkpoint_with_a_diff),
    Scan("approvals/", inbox_empty),
    Scan("approvals/", inbox_full),
    Scan("approvals/", inbox_at_phone_width),
    Scan("approvals/", inbox_just_decided),
    Scan("approvals/", inbox_just_decided_at_phone_width),
    Scan("approvals/", inbox_undo_refused),
    Scan("approvals/", inbox_narrowed),
    Scan("memory/", memory_page),
    Scan("tokens/", tokens_empty),
    Scan("tokens/", tokens_with_a_new_token),
    Scan("tokens/", tokens_with_a_form_error),
    Scan("tokens/", tokens_at_phone_width),
    Scan("settings/", settings_page),
    Scan("settings/", settings_with_a_form_error),
    Scan("settings/notifications/", notifications_with_a_webhook_and_its_secret),
    Scan("settings/notifications/", notifications_with_a_form_error, landed="settings/notifications/webhooks/"),
    Scan("settings/notifications/unsubscribe/<str:token>/", unsubscribe_page),
    Scan("accounts/login/", login_page),
    Scan("accounts/login/", login_with_an_error),
    Scan("staff/retention/", staff_retention),
    Scan("staff/retention/", staff_retention_zero_grace, landed="staff/retention/policy/"),
    Scan("missions/<int:pk>/cancel/", cancel_confirmation),
    Scan("missions/<int:pk>/restore/", restore_confirmation),
    Scan("missions/<int:pk>/restore/", restore_without_a_checkpoint),
    Scan("missions/<int:pk>/retention/delete/", delete_confirmation),
    Scan(None, not_found),
]

# Routes with no scan, and why. POST-only actions (pause, decide, revoke, log out...) are not
# listed: post_only finds them in the authorization matrix's table.
NOT_SCANNED = {
    "admin/": "Django's admin site: Django's own markup, for staff, not one of our pages",
    "api/v1/": "the API's root: nothing there (404 JSON)",
    "api/v1/openapi.json": "a JSON document for agents, not a page",
    "api/v1/docs": "django-ninja's generated API reference for agent developers, not one of our pages",
    "mcp": "the MCP server for agent hosts (JSON-RPC over HTTP, tokens only), not a page",
    "approvals/count/": "the navigation's inbox badge as a fragment its poll swaps in: scanned inside every page above",
    "account/export/": "a JSON download (Content-Disposition: attachment), not a page",
    "accounts/password_change/": "Django's stock view shown with the admin's templates; no page of ours links to it",
    "accounts/password_change/done/": "likewise (Django's stock password views)",
}


def post_only(route: str) -> bool:
    """The matrix's table says a GET here answers 405 to whoever may use the route (the others are
    sent to sign in, or 404): an action, not a page."""
    answers = set(EXPECTED[("GET", route)].values())
    return 405 in answers and answers <= {302, 404, 405}


def test_every_html_page_route_is_scanned():
    routes = set(page_routes())
    actions = {route for route in routes if post_only(route)}
    scanned = {scan.route for scan in SCANS} - {None}
    assert scanned <= routes, f"scans of routes that do not exist: {scanned - routes}"
    assert set(NOT_SCANNED) <= routes, f"exclusions of routes that do not exist: {set(NOT_SCANNED) - routes}"
    assert not scanned & (set(NOT_SCANNED) | actions), "a route is both scanned and excluded"
    missing = routes - scanned - set(NOT_SCANNED) - actions
    assert not missing, f"pages with no accessibility scan (add a Scan, or a reason in NOT_SCANNED): {sorted(missing)}"


@pytest.fixture
def world(page, open_page, login, alice, django_user_model) -> World:
    staff = django_user_model.objects.create_user("sam", password="sam-password", is_staff=True)
    return World(page=page, open_page=open_page, login=login, user=alice, staff=staff)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.long
@pytest.mark.parametrize("scan", SCANS, ids=lambda scan: scan.id)
def test_the_page_has_no_accessibility_violation(world, scan):
    scan.state(world)
    if scan.route is not None:
        landed = resolve(urlsplit(world.page.url).path).route
        expected = scan.landed or scan.route
        assert landed == expected, f"{scan.id} ended on {world.page.url}, not on the route {expected!r}"
    assert_no_violations(world.page)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_deliberate_violation_is_reported_so_the_scan_would_see_others(page, open_page):
    open_page("/accounts/login/")
    page.evaluate("() => document.querySelector('main').append(document.createElement('img'))")
    results = AXE.run(page)
    assert [violation["id"] for violation in results.response["violations"]] == ["image-alt"], violations_report(results)
