"""The mission flows with the keyboard alone, in Chromium: from the board, open a quest, approve an
approval, correct a milestone, pause the mission and restore it to an earlier checkpoint (through
its confirmation). Only key presses and typing: no click, no programmatic focus. Every element the
Tab key lands on shows that it has focus."""

import pytest
from playwright.sync_api import Locator, Page, expect

from checkpoints.models import Checkpoint
from quests.models import Approval, Constraint, Milestone, Mission
from quests.services import approvals, milestones, records
from tests.builders import agent_for, running

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# What a person sees of focus: an outline or a shadow on the element; an SVG link in the checkpoint
# tree shows it on its circle instead (an outline would not follow the circle), in the focus colour
# of static/css/questlog.css (--focus).
FOCUS_SHOWN = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return "left the page";
  const shows = (style) =>
    (style.outlineStyle !== "none" && parseFloat(style.outlineWidth) > 0) || style.boxShadow !== "none";
  if (shows(getComputedStyle(el))) return "";
  if (el instanceof SVGElement && [...el.querySelectorAll("circle")].some(
      (shape) => getComputedStyle(shape).stroke === "rgb(240, 160, 32)")) return "";
  return "no visible focus on " + el.outerHTML.slice(0, 160);
}"""


def is_focused(target: Locator) -> bool:
    return target.evaluate("el => el === document.activeElement", timeout=5_000)


def tab_to(page: Page, target: Locator, *, max_presses: int = 120) -> None:
    """Press Tab until the target has focus, checking that each element reached shows its focus.
    Past the last element Tab leaves the page for the browser's own controls (the body is then the
    active element); the next press must come back into the page."""
    left_page = False
    for _ in range(max_presses):
        page.keyboard.press("Tab")
        problem = page.evaluate(FOCUS_SHOWN)
        if problem == "left the page":
            assert not left_page, "two presses of Tab in a row reached nothing on the page"
            left_page = True
            continue
        assert not problem, problem
        left_page = False
        if is_focused(target):
            return
    raise AssertionError(f"{target} not reached with {max_presses} presses of Tab")


def mission_with_everything_to_do(user) -> tuple[Mission, Approval, Milestone]:
    """Stopped on an approval, with a milestone to review and two checkpoints to go back to."""
    agent = agent_for(user)
    mission, run = running(user, "Book the Lisbon trip", agent=agent)
    records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": "search"})
    milestone, _ = milestones.milestone_claim(
        actor=agent,
        run_id=run.pk,
        kind="research_complete",
        title="Venues shortlisted",
        summary="Two venues under budget.",
        gate=False,
        agent_state={"step": "plan"},
    )
    approval, _ = approvals.approval_request(
        actor=agent,
        run_id=run.pk,
        action="deploy to production",
        payload={"environment": "production"},
        reason="Deploying changes the public site.",
        agent_state={"step": "deploy"},
    )
    return mission, approval, milestone


def test_approve_correct_pause_and_restore_with_the_keyboard_alone(page, open_page, login, alice):
    mission, approval, milestone = mission_with_everything_to_do(alice)
    login(alice)
    open_page("/")

    tab_to(page, page.get_by_role("link", name="Book the Lisbon trip"))
    page.keyboard.press("Enter")
    status = page.locator("#mission-status")
    expect(status).to_have_text("Waiting for approval")

    request = page.get_by_role("article", name="deploy to production")
    tab_to(page, request.get_by_role("button", name="Approve", exact=True))
    page.keyboard.press("Enter")
    expect(status).to_have_text("Ready")
    approval.refresh_from_db()
    assert approval.status == "approved"

    review = page.get_by_role("article", name="Venues shortlisted")
    tab_to(page, review.get_by_label("Correction"))
    page.keyboard.type("Only venues with step-free access")
    tab_to(page, review.get_by_role("button", name="Correct"))
    page.keyboard.press("Enter")
    expect(page.locator("#constraints")).to_contain_text("Only venues with step-free access")
    milestone.refresh_from_db()
    assert milestone.review_status == "corrected"
    assert Constraint.objects.filter(mission=mission, text="Only venues with step-free access", source="correction").exists()

    tab_to(page, page.get_by_role("button", name="Pause", exact=True))
    page.keyboard.press("Space")
    expect(status).to_have_text("Paused")
    assert Mission.objects.get(pk=mission.pk).status == "paused"

    choice = page.get_by_label("Roll back to")
    tab_to(page, choice)
    first_option = choice.locator("option").first.get_attribute("value")
    page.keyboard.press("Home")  # a closed select takes the arrow keys, Home and End
    assert choice.input_value() == first_option
    earlier = Checkpoint.objects.get(pk=int(first_option))
    tab_to(page, page.get_by_role("button", name="Restore", exact=True))
    page.keyboard.press("Enter")
    confirm = page.get_by_role("button", name="Yes, restore")
    expect(confirm).to_be_visible()  # the confirmation comes right after the Restore button
    tab_to(page, confirm, max_presses=10)
    page.keyboard.press("Enter")
    expect(status).to_have_text("Ready")
    mission.refresh_from_db()
    assert mission.status == "ready"
    assert mission.head_checkpoint.note == f"Restored from #{earlier.seq}"
