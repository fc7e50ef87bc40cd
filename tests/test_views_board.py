"""The quest board at /: the user's missions as quests."""

from datetime import UTC

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quests.models import Mission
from quests.selectors.board import BOARD_PAGE_SIZE
from quests.services import milestones, missions
from tests.builders import agent_for, fast_password_hashing, new_mission, opening_tag, person, running, waiting_on_approval, waiting_on_gate  # noqa: F401

pytestmark = pytest.mark.django_db


def test_it_sends_people_who_are_not_logged_in_to_the_login_page(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_it_explains_how_an_agent_starts_a_quest_when_there_is_none(alice_client):
    body = alice_client.get("/").content.decode()
    assert "No quests yet" in body
    assert "/tokens/" in body
    assert "Authorization: Bearer" in body
    assert "http://testserver/api/v1/missions" in body


def test_it_shows_the_stop_reason_as_a_plain_sentence_and_the_next_action(alice_client, alice):
    waiting_on_approval(alice, "Ship the pricing page", action="deploy to production")
    body = alice_client.get("/").content.decode()
    assert "Ship the pricing page" in body
    assert "Waiting for your approval to deploy to production" in body
    assert "Review now" in body
    assert "Waiting for approval" in body  # the status badge


def test_it_shows_a_blocked_quest_with_its_retry_time(alice_client, alice, settings):
    from datetime import datetime

    from quests.services import runs

    agent = agent_for(alice)
    mission, run = running(alice, "Sync the CRM", agent=agent)
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external", detail="CRM unreachable", retry_at=datetime(2030, 1, 1, 14, 0, tzinfo=UTC))
    body = alice_client.get("/").content.decode()
    assert "Blocked: CRM unreachable, retrying after Jan 1, 2030, 14:00 UTC" in body


def test_progress_and_badges_come_from_approved_milestones_only(alice_client, alice):

    mission, milestone = waiting_on_gate(alice)
    body = alice_client.get("/").content.decode()
    assert "0 of 2 milestones approved" in body
    milestones.milestone_review(actor=person(alice), milestone_id=milestone.pk, action="approve")
    body = alice_client.get("/").content.decode()
    assert "1 of 2 milestones approved" in body
    assert "★</span> Venues shortlisted" in body


def test_a_quest_held_by_a_gate_names_the_milestone_and_makes_its_review_the_main_action(alice_client, alice):
    mission, milestone = waiting_on_gate(alice, "Plan the offsite")
    ready = new_mission(alice, "Write the agenda")
    body = alice_client.get("/").content.decode()
    assert f"Waiting for your review of “{milestone.title}”" in body
    assert f'<a class="button primary" href="/missions/{mission.pk}/#approvals"' in body
    # A quest that waits for nobody offers a plain link, not the page's main action.
    assert f'<a class="button" href="/missions/{ready.pk}/"' in body


def test_a_withdrawn_gate_no_longer_holds_the_quest_on_its_card(alice_client, alice):
    from quests.models import Milestone

    mission, milestone = waiting_on_gate(alice, "Plan the offsite")
    Milestone.objects.filter(pk=milestone.pk).update(withdrawn=True)
    body = alice_client.get("/").content.decode()
    assert "Waiting for your review of" not in body


def test_a_paused_quest_offers_resume_as_a_button_that_works_without_javascript(alice_client, alice):
    mission = new_mission(alice)
    missions.mission_pause(actor=person(alice), mission_id=mission.pk)
    body = alice_client.get("/").content.decode()
    assert f'action="/missions/{mission.pk}/unpause/"' in body
    response = alice_client.post(f"/missions/{mission.pk}/unpause/", {"next": "/"})
    assert response.status_code == 302 and response["Location"] == "/"
    mission.refresh_from_db()
    assert mission.status == "ready"


def test_resume_from_the_board_with_htmx_swaps_the_quest_list(alice_client, alice):
    mission = new_mission(alice)
    missions.mission_pause(actor=person(alice), mission_id=mission.pk)
    response = alice_client.post(f"/missions/{mission.pk}/unpause/", {"next": "/"}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="quest-list")
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="quest-list"')
    assert 'id="inbox-count"' in body and 'hx-swap-oob="true"' in body
    assert "<html" not in body


def test_it_filters_by_status(alice_client, alice):
    new_mission(alice, "A ready quest")
    waiting_on_approval(alice, "A waiting quest")
    body = alice_client.get("/?status=waiting_for_approval").content.decode()
    assert "A waiting quest" in body and "A ready quest" not in body
    body = alice_client.get("/?status=nonsense").content.decode()
    assert "A waiting quest" in body and "A ready quest" in body


def test_it_shows_only_the_users_own_quests(alice_client, alice, bob):
    new_mission(bob, "Bob secret quest")
    new_mission(alice, "Alice quest")
    body = alice_client.get("/").content.decode()
    assert "Alice quest" in body and "Bob secret quest" not in body


def test_staff_see_nothing_of_other_users_quests(client, alice, bob):
    bob.is_staff = True
    bob.save()
    new_mission(alice, "Alice quest")
    client.force_login(bob)
    assert "Alice quest" not in client.get("/").content.decode()


def test_it_polls_on_the_mission_pages_rule_quickly_while_one_runs_slowly_while_one_may_start(alice_client, alice):
    """The board asks what the mission page asks (quests.web.live): a ready quest can start at any
    moment, so a board of ready quests polls too, only less often than one with a quest running."""

    def board_tag() -> str:
        return opening_tag(alice_client.get("/").content.decode(), "quest-list")

    paused = new_mission(alice, "Paused quest")
    missions.mission_pause(actor=person(alice), mission_id=paused.pk)
    assert 'hx-trigger="every' not in board_tag()  # only a person moves a paused quest
    new_mission(alice, "Ready quest")
    assert 'hx-trigger="every 15s"' in board_tag()
    running(alice, "Running quest")
    assert 'hx-trigger="every 4s"' in board_tag()


def test_a_poll_with_nothing_new_answers_204_and_a_change_answers_the_list(alice_client, alice):
    from quests.selectors.board import board_version

    mission, run = running(alice)
    version = board_version(alice)
    unchanged = alice_client.get(f"/?since={version}", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="quest-list")
    assert unchanged.status_code == 204
    missions.mission_pause(actor=person(alice), mission_id=mission.pk)
    changed = alice_client.get(f"/?since={version}", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="quest-list")
    assert changed.status_code == 200
    assert "Paused by you" in changed.content.decode()
    assert 'hx-trigger="every' not in opening_tag(changed.content.decode(), "quest-list")


def test_the_page_varies_on_the_htmx_header(alice_client):
    assert "HX-Request" in alice_client.get("/")["Vary"]


def test_the_navigation_shows_the_inbox_count_and_staff_only_links(client, alice, bob):
    waiting_on_approval(alice)
    client.force_login(alice)
    body = client.get("/").content.decode()
    assert 'data-count="1"' in body
    for href in ('href="/approvals/"', 'href="/memory/"', 'href="/tokens/"'):
        assert href in body
    assert 'href="/staff/retention/"' not in body
    alice.is_staff = True
    alice.save()
    assert 'href="/staff/retention/"' in client.get("/").content.decode()


def make_quests(user, count: int, **fields) -> list:
    return Mission.objects.bulk_create(
        Mission(owner=user, title=fields.get("title", f"Quest {n}"), objective=fields.get("objective", f"Objective {n}")) for n in range(count)
    )


def test_the_board_shows_a_page_of_quests_with_links_to_the_others(alice_client, alice):
    make_quests(alice, BOARD_PAGE_SIZE + 5)
    first = alice_client.get("/")
    assert first.status_code == 200
    html = first.content.decode()
    assert html.count('class="quest card') == BOARD_PAGE_SIZE
    assert 'rel="next" href="?page=2"' in html and "Page 1 of 2" in html
    second = alice_client.get("/?page=2").content.decode()
    assert second.count('class="quest card') == 5 and 'rel="prev" href="?page=1"' in second
    # A page past the end shows the last one, never an error.
    assert alice_client.get("/?page=99").status_code == 200
    assert alice_client.get("/?page=nope").status_code == 200


def test_the_search_finds_words_in_title_or_objective_and_counts_stay_exact(alice_client, alice):
    make_quests(alice, 3, title="Plan the offsite", objective="Book a lodge")
    make_quests(alice, 2, title="Quarterly report", objective="Numbers for the board")
    html = alice_client.get("/?q=offsite+lodge").content.decode()
    assert html.count('class="quest card') == 3
    assert 'All <span class="n">3</span>' in html
    assert 'value="offsite lodge"' in html  # the search box keeps the words
    none = alice_client.get("/?q=nothing-like-this").content.decode()
    assert "matches “nothing-like-this”" in none and "No quests yet" not in none


def test_the_board_costs_the_same_queries_at_any_size(alice_client, alice):
    make_quests(alice, 3)
    with CaptureQueriesContext(connection) as small:
        alice_client.get("/")
    make_quests(alice, 300)
    with CaptureQueriesContext(connection) as large:
        alice_client.get("/")
    assert len(large.captured_queries) == len(small.captured_queries)


# ---- the poll's version: what the page shows, not every quest there is -----------------------


def poll(client, version: str, query: str = ""):
    return client.get(f"/?{query}{'&' if query else ''}since={version}", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="quest-list")


def test_a_save_state_change_of_a_quest_on_the_page_answers_the_poll(alice_client, alice):
    """A record changes a quest's save state without a status change (no updated_at): the card
    may show something new, so the poll answers the list."""
    from quests.selectors.board import board_version
    from quests.services import records

    mission, run = running(alice, "Shown quest")
    version = board_version(alice)
    records.record_create(actor=agent_for(alice), run_id=run.pk, kind="decision", text="Take the train.")
    assert poll(alice_client, version).status_code == 200


def test_a_save_state_change_of_a_quest_on_another_page_keeps_the_poll_quiet(alice_client, alice):
    from quests.selectors.board import board_version
    from quests.services import records

    mission, run = running(alice, "Oldest activity")  # then pushed to page 2 by newer quests
    make_quests(alice, BOARD_PAGE_SIZE)
    version = board_version(alice)
    assert "Oldest activity" not in alice_client.get("/").content.decode()
    records.record_create(actor=agent_for(alice), run_id=run.pk, kind="decision", text="Take the train.")
    assert poll(alice_client, version).status_code == 204
    # Page 2 shows it, so page 2's poll answers.
    assert board_version(alice, page=2) != version
    page_2 = board_version(alice, page=2)
    records.record_create(actor=agent_for(alice), run_id=run.pk, kind="decision", text="Book seats.")
    assert poll(alice_client, page_2, "page=2").status_code == 200


def test_the_version_the_page_carries_is_the_one_its_poll_compares(alice_client, alice):
    from quests.selectors.board import board, board_version

    running(alice, "Flight")
    make_quests(alice, 3, title="Train")
    for status, q, page in ((None, "", 1), ("running", "", 1), (None, "train", 1), ("ready", "train", 2)):
        assert board(alice, status, q, page)["version"] == board_version(alice, status, q, page)
