"""The approval inbox /approvals/ and the decisions made from it or from the mission page."""

import json
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quests.models import Approval, Constraint, Milestone
from quests.selectors.people import INBOX_PAGE_SIZE
from quests.services import approvals
from tests.builders import agent_for, fast_password_hashing, person, waiting_on_approval, waiting_on_gate  # noqa: F401

pytestmark = pytest.mark.django_db


def decide(client, approval, origin: str = "/approvals/", htmx_target: str | None = None, **data):
    extra = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": htmx_target} if htmx_target else {}
    return client.post(f"/approvals/{approval.pk}/decide/", {"next": origin, **data}, **extra)


def test_it_lists_approvals_and_gate_milestones_oldest_first_with_their_reasons(alice_client, alice):
    first, approval = waiting_on_approval(alice, "First quest")
    second, milestone = waiting_on_gate(alice, "Second quest")
    body = alice_client.get("/approvals/").content.decode()
    assert body.index("deploy to production") < body.index("Venues shortlisted")
    assert "Deploying changes the public site." in body and "Two venues under budget." in body
    assert "First quest" in body and "Second quest" in body
    for word in (">Approve<", ">Reject<", ">Edit and approve<", ">Correct<"):
        assert word in body
    assert 'data-count="2"' in body


def test_it_shows_nothing_of_other_users(alice_client, bob):
    waiting_on_approval(bob, "Bob quest")
    body = alice_client.get("/approvals/").content.decode()
    assert "Bob quest" not in body and "Inbox zero" in body


def test_approve_makes_the_mission_ready_and_drops_the_count(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    response = decide(alice_client, approval, htmx_target="inbox", decision="approve")
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="inbox"') and "Inbox zero" in body
    assert 'id="inbox-count" class="count zero" data-count="0" hx-swap-oob="true"' in body
    approval.refresh_from_db()
    mission.refresh_from_db()
    assert approval.status == "approved" and approval.decided_payload == approval.payload
    assert mission.status == "ready"


def test_reject_keeps_the_note(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    response = decide(alice_client, approval, decision="reject", note="Not before the launch email.")
    assert response.status_code == 302 and response["Location"] == "/approvals/"
    approval.refresh_from_db()
    assert approval.status == "rejected" and approval.note == "Not before the launch email."


def test_edit_and_approve_with_invalid_json_changes_nothing_and_keeps_what_was_typed(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    origin = f"/missions/{mission.pk}/"
    response = decide(alice_client, approval, origin=origin, decision="edit", payload='{"environment": "staging",')
    body = response.content.decode()
    assert response.status_code == 422
    assert "The payload is not valid JSON" in body and "Nothing was changed." in body
    assert "{&quot;environment&quot;: &quot;staging&quot;," in body
    approval.refresh_from_db()
    assert approval.status == "pending"
    response = decide(alice_client, approval, origin=origin, decision="edit", payload='["not", "an object"]')
    assert response.status_code == 422 and "must be a JSON object" in response.content.decode()


def test_edit_and_approve_with_valid_json_sends_the_edited_payload(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    origin = f"/missions/{mission.pk}/"
    response = decide(alice_client, approval, origin=origin, htmx_target="mission-body", decision="edit", payload=json.dumps({"environment": "staging"}))
    assert response.status_code == 200
    assert 'data-status="ready"' in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == "edited" and approval.decided_payload == {"environment": "staging"}


def test_deciding_twice_is_a_form_error(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    approvals.approval_decide(actor=person(alice), approval_id=approval.pk, decision="approve")
    response = decide(alice_client, approval, decision="reject", note="Changed my mind.")
    assert response.status_code == 422
    assert "already approved" in response.content.decode()


def test_an_unknown_decision_is_a_form_error(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    assert decide(alice_client, approval, decision="maybe").status_code == 422


def test_another_users_approval_or_milestone_is_404(client, alice, bob):
    mission, approval = waiting_on_approval(alice)
    other, milestone = waiting_on_gate(alice, "Other")
    client.force_login(bob)
    assert decide(client, approval, decision="approve").status_code == 404
    assert client.post(f"/milestones/{milestone.pk}/review/", {"action": "approve"}).status_code == 404
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_a_foreign_next_is_ignored(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    response = decide(alice_client, approval, origin="https://evil.example/", decision="approve")
    assert response["Location"] == f"/missions/{mission.pk}/"


def test_correct_turns_the_note_into_a_constraint(alice_client, alice):
    mission, milestone = waiting_on_gate(alice)
    response = alice_client.post(
        f"/milestones/{milestone.pk}/review/",
        {"action": "correct", "note": "Only venues with step-free access", "next": f"/missions/{mission.pk}/"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="mission-body",
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert "Only venues with step-free access" in body
    constraint = Constraint.objects.get(mission=mission, text="Only venues with step-free access")
    assert constraint.source == "correction"
    milestone.refresh_from_db()
    assert milestone.review_status == "corrected"


def test_correct_without_a_note_is_a_form_error(alice_client, alice):
    mission, milestone = waiting_on_gate(alice)
    response = alice_client.post(f"/milestones/{milestone.pk}/review/", {"action": "correct", "note": "  ", "next": "/approvals/"})
    assert response.status_code == 422
    assert "A correction needs a note" in response.content.decode()
    assert Milestone.objects.get(pk=milestone.pk).review_status == "pending_review"


def test_approving_a_gate_milestone_verifies_its_checkpoint_and_counts_as_progress(alice_client, alice):
    mission, milestone = waiting_on_gate(alice)
    alice_client.post(f"/milestones/{milestone.pk}/review/", {"action": "approve", "next": "/approvals/"})
    mission.refresh_from_db()
    assert mission.status == "ready" and mission.last_verified_checkpoint_id == milestone.checkpoint_id
    assert "1 of 2 milestones approved" in alice_client.get("/").content.decode()


def test_a_decision_made_elsewhere_still_shows_its_message(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    Approval.objects.filter(pk=approval.pk).update(status="rejected")
    response = decide(alice_client, approval, htmx_target="inbox", decision="approve")
    assert response.status_code == 422
    assert "already rejected" in response.content.decode()


def test_the_inbox_varies_on_the_htmx_header(alice_client):
    assert "HX-Request" in alice_client.get("/approvals/")["Vary"]


def test_decisions_need_a_post(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    assert alice_client.get(f"/approvals/{approval.pk}/decide/").status_code == 405


# ---- The navigation's badge, polled by every page --------------------------------------------


def badge(client, since: int | None = None):
    return client.get("/approvals/count/" + ("" if since is None else f"?since={since}"), HTTP_HX_REQUEST="true")


def test_the_badge_answers_204_while_the_count_is_the_same_and_the_new_badge_when_it_changes(alice_client, alice):
    first = badge(alice_client)
    assert first.status_code == 200
    html = first.content.decode()
    assert 'id="inbox-count"' in html and 'data-count="0"' in html and "hx-swap-oob" not in html
    assert 'hx-get="/approvals/count/?since=0"' in html and 'hx-trigger="every 15s"' in html
    assert badge(alice_client, since=0).status_code == 204
    waiting_on_approval(alice)
    changed = badge(alice_client, since=0)
    assert changed.status_code == 200
    html = changed.content.decode()
    assert 'data-count="1"' in html and "since=1" in html and 'data-announce="Inbox: 1 waiting for you."' in html
    assert badge(alice_client, since=1).status_code == 204
    assert badge(alice_client, since="nonsense").status_code == 200


def test_the_badge_counts_only_the_persons_own_and_asks_a_constant_number_of_queries(alice_client, alice, bob, django_assert_num_queries):
    waiting_on_approval(bob, "Bob quest")
    waiting_on_gate(bob, "Bob gate")
    assert 'data-count="0"' in badge(alice_client).content.decode()
    # The session, its user, and one count of what waits (approvals, milestones awaiting review,
    # memory proposals): however many.
    with django_assert_num_queries(3):
        assert badge(alice_client, since=0).status_code == 204
    for n in range(3):
        waiting_on_approval(alice, f"Quest {n}")
        waiting_on_gate(alice, f"Gate {n}")
    with django_assert_num_queries(3):
        assert 'data-count="6"' in badge(alice_client, since=0).content.decode()


def test_every_page_of_a_signed_in_person_carries_the_polling_badge(alice_client, client):
    for path in ("/", "/approvals/", "/tokens/", "/memory/"):
        html = alice_client.get(path).content.decode()
        assert 'hx-get="/approvals/count/?since=0"' in html, path
    client.logout()
    assert "inbox-count" not in client.get("/accounts/login/").content.decode()


# ---- paging: 25 items a page, the cost of a page the same whatever waits -------------------------


def many_waiting(user, count: int) -> list[tuple[str, int]]:
    """`count` waiting items, approvals and gate milestones in turn, in the order they were asked."""
    agent = agent_for(user)
    made = []
    for i in range(count):
        if i % 2 == 0:
            made.append(("approval", waiting_on_approval(user, f"Quest {i:03d}", action=f"action {i:03d}", agent=agent)[1].pk))
        else:
            made.append(("milestone", waiting_on_gate(user, f"Quest {i:03d}", agent=agent)[1].pk))
    return made


def shown(body: str) -> list[tuple[str, int]]:
    return [(kind, int(pk)) for kind, pk in re.findall(r'<article class="item (approval|milestone)[^"]*" id="\w+-(\d+)"', body)]


def queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_the_inbox_makes_the_same_queries_with_3_and_300_waiting_items(alice_client, alice):
    many_waiting(alice, 3)
    three = queries(alice_client, "/approvals/")
    # The other 297 straight into the tables, on the same missions: the inbox reads rows.
    missions = list(alice.missions.all())
    Approval.objects.bulk_create(Approval(mission=missions[i % 3], action=f"bulk {i}", payload={}, reason="Bulk.") for i in range(150))
    Milestone.objects.bulk_create(Milestone(mission=missions[i % 3], kind="custom", title=f"bulk {i}", summary="Bulk.") for i in range(147))
    assert queries(alice_client, "/approvals/") == three
    assert queries(alice_client, "/approvals/?page=12") == three
    assert "300 waiting" in alice_client.get("/approvals/").content.decode()


def test_the_inbox_pages_25_items_oldest_first_with_the_exact_total(alice_client, alice):
    made = many_waiting(alice, INBOX_PAGE_SIZE + 3)
    body = alice_client.get("/approvals/").content.decode()
    assert shown(body) == made[:INBOX_PAGE_SIZE]
    assert f"{INBOX_PAGE_SIZE + 3} waiting" in body and "Page 1 of 2" in body
    assert 'href="?page=2"' in body
    body = alice_client.get("/approvals/?page=2").content.decode()
    assert shown(body) == made[INBOX_PAGE_SIZE:]
    assert 'value="/approvals/?page=2"' in body  # the forms come back to this page
    for stale in ("?page=9", "?page=abc", "?page=-1"):
        assert alice_client.get(f"/approvals/{stale}").status_code == 200
    assert shown(alice_client.get("/approvals/?page=9").content.decode()) == made[INBOX_PAGE_SIZE:]


def test_a_decision_on_page_2_answers_with_page_2(alice_client, alice):
    made = many_waiting(alice, INBOX_PAGE_SIZE + 4)
    approval = Approval.objects.get(pk=next(pk for kind, pk in made[INBOX_PAGE_SIZE:] if kind == "approval"))
    response = decide(alice_client, approval, origin="/approvals/?page=2", htmx_target="inbox", decision="approve")
    body = response.content.decode()
    assert response.status_code == 200
    assert "Page 2 of 2" in body
    assert shown(body) == [item for item in made[INBOX_PAGE_SIZE:] if item != ("approval", approval.pk)]
    milestone_id = next(pk for kind, pk in made[INBOX_PAGE_SIZE:] if kind == "milestone")
    response = alice_client.post(
        f"/milestones/{milestone_id}/review/",
        {"action": "correct", "note": " ", "next": "/approvals/?page=2"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="inbox",
    )
    assert response.status_code == 422 and "Page 2 of 2" in response.content.decode()
    response = alice_client.post(f"/milestones/{milestone_id}/review/", {"action": "approve", "next": "/approvals/?page=2"})
    assert response.status_code == 302 and response["Location"] == "/approvals/?page=2"


def test_deciding_the_last_item_of_the_last_page_answers_with_the_page_before(alice_client, alice):
    made = many_waiting(alice, INBOX_PAGE_SIZE + 1)
    kind, pk = made[-1]
    assert kind == "milestone"
    response = alice_client.post(
        f"/milestones/{pk}/review/", {"action": "approve", "next": "/approvals/?page=2"}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="inbox"
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert shown(body) == made[:INBOX_PAGE_SIZE] and "Page 2" not in body
