"""A grace period of 0 days (a quest's working state deleted the moment it ends) is saved from the
staff page only once confirmed."""

import pytest
from django.test import Client

from checkpoints.models import RetentionPolicy

pytestmark = pytest.mark.django_db

POLICY = {"approved_max_days": "730", "memory_max_days": "180", "snapshot_prune_days": "3", "snapshot_keep_newest": "5", "purge_batch_size": "50"}


@pytest.fixture
def staff(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_user("sam", is_staff=True))
    return client


def test_zero_days_is_asked_to_be_confirmed(staff):
    before = RetentionPolicy.current().grace_days
    response = staff.post("/staff/retention/policy/", {**POLICY, "grace_days": "0"})
    body = response.content.decode()
    assert response.status_code == 422
    assert "A grace period of 0 days deletes" in body
    assert 'type="checkbox" name="zero_grace_confirmed"' in body
    assert RetentionPolicy.current().grace_days == before


def test_zero_days_confirmed_is_saved(staff):
    response = staff.post("/staff/retention/policy/", {**POLICY, "grace_days": "0", "zero_grace_confirmed": "on"})
    assert response.status_code == 302
    assert RetentionPolicy.current().grace_days == 0


def test_other_values_need_no_confirmation(staff):
    assert "zero_grace_confirmed" not in staff.get("/staff/retention/").content.decode()
    assert staff.post("/staff/retention/policy/", {**POLICY, "grace_days": "1"}).status_code == 302
