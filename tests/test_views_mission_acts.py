"""The person's own decisions and reviews on the mission page: on the timeline (who, when, what, an
edit's before and after) and in the decided approvals; background snapshots folded away."""

import pytest

from quests.services import approvals, milestones, records
from tests.builders import agent_for, fast_password_hashing, person, running, waiting_on_approval, waiting_on_gate  # noqa: F401

pytestmark = pytest.mark.django_db


def test_the_timeline_shows_an_edit_with_its_before_and_after(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    approvals.approval_decide(
        actor=person(alice),
        approval_id=approval.pk,
        decision="edit",
        payload={"environment": "staging", "version": "1.2"},
        note="Staging first.",
    )
    body = alice_client.get(f"/missions/{mission.pk}/").content.decode()
    assert "Approved an edited “deploy to production”" in body
    assert "by alice" in body and "“Staging first.”" in body
    assert 'environment: <span class="before">production</span>' in body and '<span class="after">staging</span>' in body


def test_the_timeline_shows_a_rejection_its_undoing_and_a_review(alice_client, alice):
    agent = agent_for(alice)
    mission, approval = waiting_on_approval(alice, agent=agent)
    approvals.approval_decide(actor=person(alice), approval_id=approval.pk, decision="reject", note="Not now.")
    approvals.approval_undo(actor=person(alice), approval_id=approval.pk)
    body = alice_client.get(f"/missions/{mission.pk}/").content.decode()
    assert "Rejected “deploy to production”" in body and "Took back the decision on “deploy to production”" in body
    assert body.index("Took back the decision") < body.index("Rejected “deploy")  # newest first

    other, milestone = waiting_on_gate(alice, agent=agent)
    milestones.milestone_review(actor=person(alice), milestone_id=milestone.pk, action="correct", note="Step-free access only")
    body = alice_client.get(f"/missions/{other.pk}/").content.decode()
    assert "Corrected the milestone “Venues shortlisted”" in body and "“Step-free access only”" in body


def test_decided_approvals_say_who_decided_and_when(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    approvals.approval_decide(actor=person(alice), approval_id=approval.pk, decision="approve")
    approval.refresh_from_db()
    body = alice_client.get(f"/missions/{mission.pk}/").content.decode()
    decided = body[body.index('<ul class="plain decided">') :]
    assert "by alice" in decided[:800] and approval.decided_at.isoformat()[:19] in decided[:800]


def test_background_snapshots_are_folded_away(alice_client, alice):
    from checkpoints.models import Checkpoint

    mission, run = running(alice)
    agent = agent_for(alice)
    records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": 1})
    last = Checkpoint.objects.filter(mission=mission).latest("seq")
    Checkpoint.objects.filter(pk=last.pk).update(trigger="background")
    body = alice_client.get(f"/missions/{mission.pk}/").content.decode()
    folded = body[body.index('<details class="tl-background">') :]
    assert "1 background snapshot</summary>" in folded and f"#{last.seq}" in folded[:600]
