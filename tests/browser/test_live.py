"""Live updates in a real browser (issue 13): a poll never takes away what a person is typing
(text, focus and caret survive; a form the change removes holds the poll back and says so), focus
lands on what a person's own action changed with a polite announcement, the inbox badge follows
on every page, and a hidden tab asks nothing."""

import pytest
from playwright.sync_api import expect

from quests.services import approvals, milestones, missions, records, runs
from tests.builders import agent_for, new_mission, person, running, waiting_on_approval, waiting_on_gate

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

QUICK = 0.3  # seconds between polls here, so that a test waits for a change, not for a timer


@pytest.fixture(autouse=True)
def quick_polls(settings):
    settings.QUESTLOG_POLL_SECONDS = {"mission": QUICK, "mission_idle": QUICK, "board": QUICK, "board_idle": QUICK, "inbox": QUICK}


def running_with_milestone(user):
    """A running mission with a milestone waiting for review (not a gate: the agent goes on)."""
    agent = agent_for(user)
    mission, run = running(user, agent=agent)
    milestone, _ = milestones.milestone_claim(
        actor=agent,
        run_id=run.pk,
        kind="research_complete",
        title="Sources gathered",
        summary="Twelve sources.",
        gate=False,
        agent_state={"step": "sources"},
    )
    return mission, run, milestone, agent


def mark_body(page) -> None:
    """A mark the next swap of the mission body wipes out."""
    page.evaluate("document.getElementById('mission-body').dataset.before = 'yes'")


def caret(page, field_id: str) -> list[int]:
    return page.evaluate("(id) => { const f = document.getElementById(id); return [f.selectionStart, f.selectionEnd]; }", field_id)


@pytest.mark.parametrize("field", ["correction", "new-constraint"])
def test_typing_survives_a_poll_that_swaps_the_mission_underneath(page, open_page, login, alice, field):
    mission, run, milestone, agent = running_with_milestone(alice)
    field_id = f"correction-{milestone.pk}" if field == "correction" else "new-constraint"
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    box = page.locator(f"#{field_id}")
    box.click()
    box.press_sequentially("Use the 2025 figures")
    page.evaluate("(id) => document.getElementById(id).setSelectionRange(3, 3)", field_id)
    mark_body(page)

    records.record_create(actor=agent, run_id=run.pk, kind="decision", text="Chose the annual report.")
    records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": "report"})

    expect(page.locator("#records")).to_contain_text("Chose the annual report.")
    expect(page.locator("#mission-body")).not_to_have_attribute("data-before", "yes")
    expect(box).to_have_value("Use the 2025 figures")
    expect(box).to_be_focused()
    assert caret(page, field_id) == [3, 3]
    page.keyboard.type("d")
    expect(box).to_have_value("Used the 2025 figures")


def test_a_poll_that_would_remove_the_form_being_typed_in_is_held_back_and_announced(page, open_page, login, alice):
    mission, run, milestone, agent = running_with_milestone(alice)
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    box = page.locator(f"#correction-{milestone.pk}")
    box.click()
    box.press_sequentially("Only peer-reviewed sources")
    mark_body(page)

    milestones.milestone_review(actor=person(alice), milestone_id=milestone.pk, action="approve")  # as if in another tab

    notice = page.locator("#live-notice")
    expect(notice).to_be_visible()
    expect(page.locator("#live-announcer")).to_have_text(
        "This quest changed while you were typing. What you typed is kept; show the changes when you are ready."
    )
    page.wait_for_timeout(int(QUICK * 4 * 1000))  # several polls answered with the change: still held back
    expect(page.locator("#mission-body")).to_have_attribute("data-before", "yes")
    expect(box).to_have_value("Only peer-reviewed sources")
    expect(box).to_be_focused()

    notice.get_by_role("button", name="Show the changes").click()
    expect(page.locator("#mission-body")).not_to_have_attribute("data-before", "yes")
    expect(page.locator(f"#milestone-{milestone.pk}")).to_contain_text("Approved")
    expect(notice).to_be_hidden()
    expect(page.locator("#mission-body h1")).to_be_focused()


def test_a_poll_announces_a_new_status_or_sentence_and_nothing_else(page, open_page, login, alice):
    mission, run, milestone, agent = running_with_milestone(alice)
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    mark_body(page)
    records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": "more"})
    expect(page.locator("#mission-body")).not_to_have_attribute("data-before", "yes")
    page.wait_for_timeout(200)  # longer than the live region takes to speak
    expect(page.locator("#live-announcer")).to_have_text("")

    missions.mission_pause(actor=person(alice), mission_id=mission.pk)  # as if from another tab
    expect(page.locator("#mission-status")).to_have_text("Paused")
    expect(page.locator("#live-announcer")).to_have_text("Paused. Paused by you. Resume it when you are ready.")
    expect(page.locator("body")).to_be_focused()  # a poll moves nobody's focus


def test_approving_a_milestone_with_the_keyboard_focuses_it_and_announces_it(page, open_page, login, alice):
    mission, milestone = waiting_on_gate(alice)
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    page.locator(f"#correction-{milestone.pk}").focus()
    page.keyboard.press("Tab")
    expect(page.get_by_role("article", name="Venues shortlisted").get_by_role("button", name="Approve")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#mission-status")).to_have_text("Ready")
    expect(page.locator(f"#milestone-{milestone.pk}")).to_be_focused()
    expect(page.locator("#live-announcer")).to_have_text("Milestone “Venues shortlisted”: approved.")


def test_deciding_the_last_approval_moves_focus_to_its_confirmation_and_says_what_was_decided(page, open_page, login, alice):
    # With no other item to move on to, focus lands on the confirmation (and its Undo) in the same section.
    mission, approval = waiting_on_approval(alice)
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    page.locator(f"#note-{approval.pk}").focus()
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    expect(page.locator("#mission-status")).to_have_text("Ready")
    expect(page.locator(f"#decided-approval-{approval.pk}")).to_be_focused()
    expect(page.locator("#live-announcer")).to_have_text("You approved “deploy to production”.")


def test_a_persons_own_action_keeps_what_they_typed_elsewhere_on_the_page(page, open_page, login, alice):
    mission, milestone = waiting_on_gate(alice)
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    page.locator("#new-constraint").fill("Keep every receipt")
    card = page.get_by_role("article", name="Venues shortlisted")
    card.get_by_label("Correction").fill("Only venues with step-free access")
    card.get_by_role("button", name="Correct").click()
    expect(page.locator("#constraints")).to_contain_text("Only venues with step-free access")
    # The sent form's answer is the server's; the other form keeps what was typed in it.
    expect(page.locator("#new-constraint")).to_have_value("Keep every receipt")


def test_pausing_with_the_keyboard_focuses_the_quest_and_says_its_new_status(page, open_page, login, alice):
    mission, _ = running(alice)
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    page.get_by_role("button", name="Pause", exact=True).focus()
    page.keyboard.press("Enter")
    expect(page.locator("#mission-status")).to_have_text("Paused")
    expect(page.get_by_role("heading", level=1)).to_be_focused()
    expect(page.locator("#live-announcer")).to_have_text("Paused. Paused by you. Resume it when you are ready.")


def test_a_form_error_focuses_the_field_it_is_about(page, open_page, login, alice):
    mission, _ = running(alice)
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    box = page.locator("#new-constraint")
    box.fill("   ")
    page.evaluate("document.getElementById('new-constraint').removeAttribute('required')")
    page.get_by_role("button", name="Add constraint").click()
    expect(box).to_have_attribute("aria-invalid", "true")
    expect(box).to_be_focused()


def test_the_inbox_badge_follows_on_another_page(page, open_page, login, alice):
    agent = agent_for(alice)
    mission, run = running(alice, agent=agent)
    login(alice)
    open_page("/tokens/")
    badge = page.locator("#inbox-count")
    expect(badge).to_have_attribute("data-count", "0")
    approvals.approval_request(
        actor=agent,
        run_id=run.pk,
        action="send the newsletter",
        payload={"list": "all"},
        reason="It goes to every subscriber.",
        agent_state={"step": "send"},
    )
    expect(badge).to_have_attribute("data-count", "1")
    expect(badge).to_contain_text("1")
    expect(page.locator("#live-announcer")).to_have_text("Inbox: 1 waiting for you.")


HEARD = """() => {
  const region = document.getElementById("live-announcer");
  window.__heard = [];
  new MutationObserver(() => {
    if (region.textContent) window.__heard.push([region.textContent, performance.now()]);
  }).observe(region, {childList: true, characterData: true, subtree: true});
  announce("The quest changed.");
  announce("Inbox: 0 waiting for you.");
}"""


def test_two_things_said_at_once_are_each_heard_in_turn(page, open_page, login, alice):
    """A poll held back on the quest and the inbox count dropping happen in one moment: the second
    waits until the first has been in the live region long enough to be read."""
    login(alice)
    open_page("/")
    page.evaluate(HEARD)
    expect(page.locator("#live-announcer")).to_have_text("Inbox: 0 waiting for you.")
    heard = page.evaluate("window.__heard")
    assert [text for text, _ in heard] == ["The quest changed.", "Inbox: 0 waiting for you."]
    assert heard[1][1] - heard[0][1] >= 1000


HIDE = """(hidden) => {
  window.__hidden = hidden;
  if (!window.__hiddenPatched) {
    window.__hiddenPatched = true;
    Object.defineProperty(document, "hidden", { configurable: true, get: () => window.__hidden });
    Object.defineProperty(document, "visibilityState", { configurable: true, get: () => (window.__hidden ? "hidden" : "visible") });
  }
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def test_a_hidden_tab_asks_nothing_and_asks_once_it_is_seen_again(page, open_page, login, alice):
    mission, _ = running(alice)
    login(alice)
    polls: list[str] = []
    page.on("request", lambda request: polls.append(request.url) if "since=" in request.url else None)
    open_page(f"/missions/{mission.pk}/")
    expect(page.locator("#mission-status")).to_have_text("Running")
    page.wait_for_timeout(int(QUICK * 3 * 1000))
    assert polls, "a running mission's page polls"

    page.evaluate(HIDE, True)
    page.wait_for_timeout(int(QUICK * 2 * 1000))  # a request already on its way may land
    polls.clear()
    missions.mission_pause(actor=person(alice), mission_id=mission.pk)
    page.wait_for_timeout(int(QUICK * 8 * 1000))
    assert polls == []
    expect(page.locator("#mission-status")).to_have_text("Running")

    page.evaluate(HIDE, False)
    expect(page.locator("#mission-status")).to_have_text("Paused")
    assert polls


def test_a_board_of_ready_quests_sees_an_agent_start_one(page, open_page, login, alice):
    """The board follows the mission page's rule (quests.web.live): a ready quest may start at any
    moment, so the board asks, and shows the quest running without a reload."""
    agent = agent_for(alice)
    mission = new_mission(alice, "Book the offsite", agent=agent)
    login(alice)
    open_page("/")
    card_status = page.locator(f"#quest-list li.quest:has(#quest-{mission.pk}-title) .badge.status")
    expect(card_status).to_have_text("Ready")

    runs.run_start(actor=agent, mission_id=mission.pk, agent="test-agent")  # an agent, not the person

    expect(card_status).to_have_text("Running")
    expect(page.locator("#quest-list")).to_have_attribute("hx-trigger", f"every {QUICK}s")
