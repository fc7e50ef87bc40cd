"""Preferences, the daily digest (grouped by event kind, sent only when something waits, once a
day) and approval.expiring from the beat schedule; plus the events each transition emits."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from notifications import schedule
from notifications.models import Delivery, Notification, NotificationPreference
from notifications.services import preferences_of
from quests.models import Approval
from quests.services.runs import sweep_stalled_runs

pytestmark = pytest.mark.django_db


def start(agent, mission_id: int) -> dict:
    response = agent.post(f"missions/{mission_id}/runs", {"agent": "test"})
    assert response.status_code == 201, response.content
    return response.json()["run"]


def new_mission(agent, title: str) -> int:
    return agent.post("missions", {"title": title, "objective": "o"}).json()["id"]


def test_the_defaults_are_approvals_and_milestones_at_once_and_the_rest_in_the_digest(alice):
    assert preferences_of(alice) == {
        "approval.requested": "immediately",
        "approval.expiring": "immediately",
        "milestone.awaiting_review": "immediately",
        "mission.blocked": "digest",
        "mission.failed": "digest",
        "mission.completed": "digest",
        "run.stalled": "digest",
    }


def test_each_transition_emits_its_event_once_for_the_owner_only(agent, alice, bob):
    blocked, failed, done, stalled = (new_mission(agent, t) for t in ("Blocked quest", "Failed quest", "Done quest", "Stalled quest"))
    for mission_id, reason in ((blocked, "blocked_external"), (failed, "failed_retry_budget"), (done, "completed")):
        run = start(agent, mission_id)
        agent.post(f"runs/{run['id']}/stop", {"reason": reason, "detail": f"because {reason}"})
    start(agent, stalled)
    assert sweep_stalled_runs(timezone.now() + timedelta(seconds=settings.QUESTLOG_HEARTBEAT_TIMEOUT + 1)) == 1
    assert sweep_stalled_runs(timezone.now() + timedelta(seconds=settings.QUESTLOG_HEARTBEAT_TIMEOUT + 1)) == 0
    kinds = sorted(Notification.objects.values_list("kind", "mission__title"))
    assert kinds == [
        ("mission.blocked", "Blocked quest"),
        ("mission.completed", "Done quest"),
        ("mission.failed", "Failed quest"),
        ("run.stalled", "Stalled quest"),
    ]
    assert set(Notification.objects.values_list("owner", flat=True)) == {alice.pk}
    assert Notification.objects.get(kind="mission.failed").data["reason"] == "because failed_retry_budget"
    assert not Delivery.objects.exists()  # all four wait for the digest


def test_a_request_answered_by_a_rolled_back_transaction_leaves_no_notification(agent, run):
    response = agent.post(f"runs/{run['id']}/approvals", {"action": "a" * 10_000, "payload": {}, "reason": "r"})
    assert response.status_code == 422
    assert not Notification.objects.exists()


def test_the_digest_groups_what_waits_by_kind_and_is_sent_once_a_day_only_when_something_waits(agent, alice, bob):
    alice.email = "alice@example.com"
    alice.save()
    NotificationPreference.objects.create(owner=alice, kind="approval.requested", mode="digest")
    first, second = new_mission(agent, "First quest"), new_mission(agent, "Second quest")
    for mission_id in (first, second):
        run = start(agent, mission_id)
        agent.post(f"runs/{run['id']}/approvals", {"action": f"pay_{mission_id}", "payload": {}, "reason": "r"})
    run = start(agent, new_mission(agent, "Third quest"))
    agent.post(f"runs/{run['id']}/stop", {"reason": "completed", "detail": "done"})
    assert schedule.digests_send() == 1
    digest = Notification.objects.get(kind="digest")
    assert [(g["kind"], [i["mission_title"] for i in g["items"]]) for g in digest.data["groups"]] == [
        ("approval.requested", ["First quest", "Second quest"]),
        ("mission.completed", ["Third quest"]),
    ]
    assert digest.data["groups"][0]["items"][0]["needed"] == f"Approve or reject “pay_{first}”"
    assert list(digest.deliveries.values_list("channel", flat=True)) == ["email"]
    assert Notification.objects.filter(in_digest=True, digest=digest).count() == 3
    assert schedule.digests_send() == 0  # nothing waits any more: no second mail
    run = start(agent, new_mission(agent, "Fourth quest"))
    agent.post(f"runs/{run['id']}/stop", {"reason": "completed", "detail": "done"})
    assert schedule.digests_send() == 0  # today's digest went already; tomorrow's lists it
    tomorrow = timezone.now() + timedelta(days=1)
    assert schedule.digests_send(tomorrow) == 1
    assert [g["kind"] for g in Notification.objects.filter(kind="digest").order_by("-id")[0].data["groups"]] == ["mission.completed"]


def test_the_digest_leaves_out_what_no_longer_waits(agent, alice, person):
    alice.email = "alice@example.com"
    alice.save()
    NotificationPreference.objects.create(owner=alice, kind="approval.requested", mode="digest")
    decided, waiting = new_mission(agent, "Decided quest"), new_mission(agent, "Waiting quest")
    for mission_id in (decided, waiting):
        run = start(agent, mission_id)
        agent.post(f"runs/{run['id']}/approvals", {"action": f"pay_{mission_id}", "payload": {}, "reason": "r"})
    blocked = new_mission(agent, "Unblocked quest")
    run = start(agent, blocked)
    agent.post(f"runs/{run['id']}/stop", {"reason": "blocked_external", "detail": "the supplier is down"})
    assert person.post(f"approvals/{Approval.objects.get(mission_id=decided).pk}/decision", {"decision": "approve"}).status_code == 200
    start(agent, blocked)  # the agent came back: the quest is no longer blocked
    assert schedule.digests_send() == 1
    digest = Notification.objects.get(kind="digest")
    assert [(g["kind"], [i["mission_title"] for i in g["items"]]) for g in digest.data["groups"]] == [
        ("approval.requested", ["Waiting quest"]),
    ]
    assert not Notification.objects.filter(in_digest=True, digest__isnull=True).exists()  # nothing left queued


def test_no_digest_when_everything_announced_moved_on(agent, alice, person):
    NotificationPreference.objects.create(owner=alice, kind="approval.requested", mode="digest")
    run = start(agent, new_mission(agent, "Decided quest"))
    agent.post(f"runs/{run['id']}/approvals", {"action": "pay", "payload": {}, "reason": "r"})
    assert person.post(f"approvals/{Approval.objects.get().pk}/decision", {"decision": "reject", "note": "Not this month."}).status_code == 200
    assert schedule.digests_send() == 0
    assert not Notification.objects.filter(kind="digest").exists()


def test_an_approval_near_its_respond_by_time_is_announced_once(agent, run):
    soon = (timezone.now() + timedelta(hours=5)).isoformat()
    later = (timezone.now() + timedelta(days=3)).isoformat()
    near = agent.post(
        f"runs/{run['id']}/approvals/batch",
        {
            "items": [
                {"action": "soon", "payload": {}, "reason": "r", "expires_at": soon},
                {"action": "later", "payload": {}, "reason": "r", "expires_at": later},
            ]
        },
    )
    assert near.status_code == 201, near.content
    assert schedule.approvals_expiring() == 1
    assert schedule.approvals_expiring() == 0
    told = Notification.objects.get(kind="approval.expiring")
    assert told.data["approval"]["id"] == Approval.objects.get(action="soon").pk
    assert list(told.deliveries.values_list("channel", flat=True)) == ["email"]
