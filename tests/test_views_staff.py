"""/staff/retention/: the policy, what expires in the next 7 days, holds and the purge log. Only
staff reach it; for everyone else every page and action is a 404."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from checkpoints.models import PurgeLog, RetentionPolicy
from quests.models import AuditEvent, Hold, MemoryItem, Mission

pytestmark = pytest.mark.django_db

STAFF_POSTS = [
    (
        "/staff/retention/policy/",
        {"grace_days": "0", "approved_max_days": "1", "memory_max_days": "1", "snapshot_prune_days": "1", "snapshot_keep_newest": "1", "purge_batch_size": "1"},
    ),
    ("/staff/retention/holds/", {"username": "alice", "reason": "mine now"}),
    ("/staff/retention/holds/1/release/", {}),
    ("/staff/retention/purge/", {}),
]


@pytest.fixture
def staff(django_user_model) -> Client:
    user = django_user_model.objects.create_user("sam", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def web(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def ended(agent, title: str = "Done quest") -> dict:
    m = agent.post("missions", {"title": title, "objective": "x"}).json()
    run = agent.post(f"missions/{m['id']}/runs", {}).json()["run"]
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"step": 1}})
    agent.post(f"runs/{run['id']}/stop", {"reason": "completed"})
    return m


def test_non_staff_cannot_reach_the_staff_page_or_its_actions(web, agent):
    ended(agent)
    for client in (web, Client()):
        assert client.get("/staff/retention/").status_code == 404
        for url, data in STAFF_POSTS:
            assert client.post(url, data).status_code == 404, url
    assert RetentionPolicy.current().grace_days == 30
    assert not Hold.objects.exists()
    assert not PurgeLog.objects.exists()


def test_an_agent_token_cannot_reach_them_either(agent, alice):
    alice.is_staff = True
    alice.save()
    assert agent.get("/staff/retention/").status_code == 404
    assert agent.post("/staff/retention/purge/").status_code == 404


def test_the_staff_page_shows_policy_expiring_holds_and_log(staff, agent, alice, django_user_model):
    soon = ended(agent, "Soon gone")
    Mission.objects.filter(pk=soon["id"]).update(expires_at=timezone.now() + timedelta(days=2))
    later = ended(agent, "Gone later")
    Mission.objects.filter(pk=later["id"]).update(expires_at=timezone.now() + timedelta(days=20))
    MemoryItem.objects.create(owner=alice, name="tone", value="formal", approved_at=timezone.now(), expires_at=timezone.now() + timedelta(days=3))
    staff.post("/staff/retention/holds/", {"mission_id": later["id"], "reason": "Legal request 7"})
    staff.post("/staff/retention/purge/", {"dry_run": "on"})

    r = staff.get("/staff/retention/")
    assert r.status_code == 200
    html = r.content.decode()
    assert 'name="grace_days" value="30"' in html
    assert "Expiring in the next 7 days" in html
    assert r.context["expiring"]["working"]["missions"] == 1
    assert r.context["expiring"]["working"]["checkpoints"] >= 1
    assert r.context["expiring"]["long_term"]["memory_items"] == 1
    assert "Legal request 7" in html and "Gone later" in html
    assert "dry run" in html and "user:sam" in html


# A policy form that is valid as a whole: a test changes the one field it is about.
GOOD_POLICY = {
    "grace_days": "7",
    "approved_max_days": "730",
    "memory_max_days": "180",
    "snapshot_prune_days": "3",
    "snapshot_keep_newest": "5",
    "purge_batch_size": "50",
}


def test_staff_change_the_policy_with_an_audit_event(staff):
    data = dict(GOOD_POLICY)
    r = staff.post("/staff/retention/policy/", data)
    assert r.status_code == 302
    policy = RetentionPolicy.current()
    assert (policy.grace_days, policy.approved_max_days, policy.memory_max_days, policy.purge_batch_size) == (7, 730, 180, 50)
    assert policy.updated_by.username == "sam"
    event = AuditEvent.objects.get(entity="retention_policy")
    assert event.data["changes"]["grace_days"] == [30, 7]


@pytest.mark.parametrize("field,value", [("grace_days", "-1"), ("purge_batch_size", "0"), ("memory_max_days", "lots")])
def test_a_bad_policy_value_is_a_form_error(staff, field, value):
    data = {**GOOD_POLICY, field: value}
    r = staff.post("/staff/retention/policy/", data)
    assert r.status_code == 422
    assert r.context["policy_form"].errors[field]
    assert 'class="error"' in r.content.decode()
    assert RetentionPolicy.current().grace_days == 30


def test_a_hold_needs_a_reason(staff, agent):
    m = ended(agent)
    r = staff.post("/staff/retention/holds/", {"mission_id": m["id"], "reason": "  "})
    assert r.status_code == 422
    assert r.context["hold_form"].errors["reason"]
    assert not Hold.objects.exists()


@pytest.mark.parametrize("data", [{"reason": "why"}, {"mission_id": "999999", "reason": "why"}, {"username": "nobody", "reason": "why"}])
def test_a_hold_must_name_an_existing_quest_or_user(staff, alice, data):
    r = staff.post("/staff/retention/holds/", data)
    assert r.status_code == 422
    assert not Hold.objects.exists()


def test_staff_place_and_release_holds(staff, agent, alice):
    m = ended(agent)
    staff.post("/staff/retention/holds/", {"mission_id": m["id"], "reason": "Legal request 7"})
    staff.post("/staff/retention/holds/", {"username": "alice", "reason": "Account review"})
    holds = list(Hold.objects.order_by("id"))
    assert [h.mission_id for h in holds] == [m["id"], None] and holds[1].user == alice
    assert all(h.placed_by.username == "sam" and h.released_at is None for h in holds)

    r = staff.post(f"/staff/retention/holds/{holds[0].pk}/release/", follow=True)
    assert "Hold released." in r.content.decode()
    assert Hold.objects.get(pk=holds[0].pk).released_at is not None
    r = staff.post(f"/staff/retention/holds/{holds[0].pk}/release/", follow=True)
    assert "already released" in r.content.decode()
    assert staff.post("/staff/retention/holds/999999/release/").status_code == 404
    assert AuditEvent.objects.filter(entity="hold").count() == 3


def test_staff_can_run_a_dry_run_and_a_purge(staff, agent):
    m = ended(agent)
    Mission.objects.filter(pk=m["id"]).update(expires_at=timezone.now() - timedelta(minutes=1))
    r = staff.post("/staff/retention/purge/", {"dry_run": "on"}, follow=True)
    assert "Dry run: would delete 1 missions" in r.content.decode()
    assert Mission.objects.get(pk=m["id"]).purged_at is None
    r = staff.post("/staff/retention/purge/", {}, follow=True)
    assert "Purged 1 missions" in r.content.decode()
    assert Mission.objects.get(pk=m["id"]).purged_at is not None
    assert list(PurgeLog.objects.order_by("id").values_list("dry_run", "trigger", "actor")) == [
        (True, "staff", "user:sam"),
        (False, "staff", "user:sam"),
    ]


def test_a_policy_change_writes_a_new_version_and_keeps_the_old_one_as_history(staff):
    first = RetentionPolicy.current()
    data = dict(GOOD_POLICY)
    staff.post("/staff/retention/policy/", data)
    staff.post("/staff/retention/policy/", {**data, "grace_days": "9"})

    versions = list(RetentionPolicy.objects.order_by("id"))
    assert [v.grace_days for v in versions] == [30, 7, 9]
    assert versions[0].pk == first.pk and versions[0].updated_by is None
    assert RetentionPolicy.current() == versions[2]
    event = AuditEvent.objects.filter(entity="retention_policy").order_by("-id").first()
    assert event.entity_id == versions[2].pk and event.data["changes"] == {"grace_days": [7, 9]}

    r = staff.get("/staff/retention/")
    assert list(r.context["policy_history"]) == [versions[1], versions[0]]
    html = r.content.decode()
    assert 'name="grace_days" value="9"' in html
    assert f'id="policy-{versions[1].pk}"' in html and f'id="policy-{versions[0].pk}"' in html
    assert f'id="policy-{versions[2].pk}"' not in html


def test_a_purge_log_keeps_the_version_it_ran_under(staff, agent):
    staff.post("/staff/retention/purge/", {"dry_run": "on"})
    log = PurgeLog.objects.get()
    ran_under = RetentionPolicy.current()
    staff.post(
        "/staff/retention/policy/",
        {"grace_days": "1", "approved_max_days": "1", "memory_max_days": "1", "snapshot_prune_days": "1", "snapshot_keep_newest": "1", "purge_batch_size": "1"},
    )
    log.refresh_from_db()
    assert log.policy == ran_under and log.policy.grace_days == 30
    assert RetentionPolicy.current().grace_days == 1


def test_a_policy_version_is_never_edited_in_place():
    policy = RetentionPolicy.current()
    policy.grace_days = 1
    with pytest.raises(ValueError):
        policy.save()
    assert RetentionPolicy.current().grace_days == 30
