"""The Django admin lists every model with useful columns; audit events are read-only; holds and
the retention policy are changed through their services."""

import pytest
from django.apps import apps
from django.contrib import admin
from django.test import Client
from django.urls import reverse

from checkpoints.models import PurgeLog, RetentionPolicy
from quests.models import AuditEvent, Hold
from tests.test_retention_purge import finished_mission

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_(django_user_model) -> Client:
    user = django_user_model.objects.create_superuser("root", email="root@example.com")
    client = Client()
    client.force_login(user)
    return client


def models_of_both_apps():
    return [*apps.get_app_config("checkpoints").get_models(), *apps.get_app_config("quests").get_models()]


def test_every_model_is_registered():
    missing = [m.__name__ for m in models_of_both_apps() if m not in admin.site._registry]
    assert missing == []


def test_every_changelist_and_change_page_renders(admin_client_, agent, person):
    finished_mission(agent, person, "Offsite")
    from quests.retention.services.purge import retention_purge

    retention_purge(dry_run=True)
    for model in models_of_both_apps():
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        r = admin_client_.get(url)
        assert r.status_code == 200, url
        obj = model.objects.first()
        if obj is not None:
            r = admin_client_.get(reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[obj.pk]))
            assert r.status_code == 200, model.__name__


def test_changelists_filter(admin_client_, agent, person):
    finished_mission(agent, person, "Offsite")
    assert admin_client_.get("/admin/quests/mission/?status__exact=completed&purged=no").status_code == 200
    assert admin_client_.get("/admin/quests/checkpoint/?trigger__exact=stop").status_code == 200
    assert admin_client_.get("/admin/quests/auditevent/?entity=mission").status_code == 200
    assert admin_client_.get("/admin/quests/hold/?active=yes").status_code == 200


def test_audit_events_are_read_only(admin_client_, agent):
    agent.post("missions", {"title": "T", "objective": "x"})
    event = AuditEvent.objects.first()
    change_url = reverse("admin:quests_auditevent_change", args=[event.pk])
    r = admin_client_.get(change_url)
    assert r.status_code == 200
    assert 'name="_save"' not in r.content.decode()
    assert admin_client_.post(change_url, {"action": "changed"}).status_code == 403
    assert admin_client_.get(reverse("admin:quests_auditevent_add")).status_code == 403
    assert admin_client_.post(reverse("admin:quests_auditevent_delete", args=[event.pk]), {"post": "yes"}).status_code == 403
    assert AuditEvent.objects.get(pk=event.pk).action == "create"


def test_a_hold_placed_in_the_admin_goes_through_the_service(admin_client_, agent):
    m = agent.post("missions", {"title": "T", "objective": "x"}).json()
    r = admin_client_.post(reverse("admin:quests_hold_add"), {"mission": m["id"], "user": "", "reason": "Legal"})
    assert r.status_code == 302, r.content.decode()[:2000]
    hold = Hold.objects.get()
    assert hold.placed_by.username == "root" and hold.reason == "Legal"
    assert AuditEvent.objects.filter(entity="hold", action="place", entity_id=hold.pk).exists()

    r = admin_client_.post(reverse("admin:quests_hold_add"), {"mission": m["id"], "user": "", "reason": ""})
    assert r.status_code == 200 and Hold.objects.count() == 1

    admin_client_.post(reverse("admin:quests_hold_changelist"), {"action": "release_holds", "_selected_action": [hold.pk]})
    assert Hold.objects.get().released_at is not None


def test_the_policy_is_edited_in_the_admin_through_the_service(admin_client_):
    policy = RetentionPolicy.current()
    data = {"grace_days": 14, "approved_max_days": 365, "memory_max_days": 365, "snapshot_prune_days": 7, "snapshot_keep_newest": 20, "purge_batch_size": 100}
    r = admin_client_.post(reverse("admin:quests_retentionpolicy_change", args=[policy.pk]), data)
    assert r.status_code == 302
    assert RetentionPolicy.current().grace_days == 14
    assert AuditEvent.objects.filter(entity="retention_policy").exists()
    r = admin_client_.post(reverse("admin:quests_retentionpolicy_change", args=[RetentionPolicy.current().pk]), {**data, "purge_batch_size": 0})
    assert r.status_code == 200 and RetentionPolicy.current().purge_batch_size == 100


def test_a_policy_change_in_the_admin_keeps_the_old_version_read_only(admin_client_):
    old = RetentionPolicy.current()
    data = {"grace_days": 14, "approved_max_days": 365, "memory_max_days": 365, "snapshot_prune_days": 7, "snapshot_keep_newest": 20, "purge_batch_size": 200}
    admin_client_.post(reverse("admin:quests_retentionpolicy_change", args=[old.pk]), data)
    assert RetentionPolicy.current().pk != old.pk
    assert RetentionPolicy.objects.get(pk=old.pk).grace_days == 30
    old_url = reverse("admin:quests_retentionpolicy_change", args=[old.pk])
    r = admin_client_.get(old_url)
    assert r.status_code == 200 and 'name="_save"' not in r.content.decode()
    assert admin_client_.post(old_url, {**data, "grace_days": 1}).status_code == 403
    assert RetentionPolicy.objects.get(pk=old.pk).grace_days == 30
    r = admin_client_.get(reverse("admin:quests_retentionpolicy_changelist"))
    assert r.status_code == 200 and RetentionPolicy.objects.count() == 2


def test_purge_logs_are_read_only(admin_client_):
    from quests.retention.services.purge import retention_purge

    log = retention_purge(dry_run=True)
    assert admin_client_.post(reverse("admin:quests_purgelog_delete", args=[log.pk]), {"post": "yes"}).status_code == 403
    assert PurgeLog.objects.filter(pk=log.pk).exists()


def test_people_who_are_not_staff_do_not_get_in(alice):
    client = Client()
    client.force_login(alice)
    r = client.get("/admin/quests/auditevent/")
    assert r.status_code == 302 and "/admin/login/" in r["Location"]


def test_the_checkpoint_tables_old_admin_addresses_redirect_to_quests(admin_client_):
    """The tables joined the quests app (docs/architecture.md, "One app for the tables")."""
    r = admin_client_.get("/admin/checkpoints/checkpoint/?trigger__exact=stop")
    assert (r.status_code, r["Location"]) == (301, "/admin/quests/checkpoint/?trigger__exact=stop")
    r = admin_client_.get("/admin/checkpoints/")
    assert (r.status_code, r["Location"]) == (301, "/admin/quests/")
    r = admin_client_.get("/admin/checkpoints/purgelog/3/change/")
    assert (r.status_code, r["Location"]) == (301, "/admin/quests/purgelog/3/change/")
    assert list(apps.get_app_config("checkpoints").get_models()) == []
