"""Staff see every delivery in the admin, read-only: a failing endpoint is found there, and
nothing about what happened can be changed."""

import pytest
from django.apps import apps
from django.contrib import admin
from django.test import Client
from django.urls import reverse

from notifications.models import Delivery

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", email="root@example.com"))
    return client


@pytest.fixture
def failing_delivery(person, agent, run) -> Delivery:
    from tests.test_notifications_webhooks import ask

    hook = person.post("webhooks", {"url": "https://93.184.215.14/hook", "events": ["approval.requested"]}).json()
    ask(agent, run)
    delivery = Delivery.objects.get(endpoint_id=hook["id"])
    Delivery.objects.filter(pk=delivery.pk).update(attempts=3, response_status=500, last_error="The endpoint answered 500.")
    return delivery


def test_every_model_is_in_the_admin_and_every_page_renders(staff_client, failing_delivery):
    for model in apps.get_app_config("notifications").get_models():
        assert model in admin.site._registry
        name = f"admin:notifications_{model._meta.model_name}"
        assert staff_client.get(reverse(f"{name}_changelist")).status_code == 200
        if (obj := model.objects.first()) is not None:
            assert staff_client.get(reverse(f"{name}_change", args=[obj.pk])).status_code == 200


def test_staff_find_failing_deliveries_and_change_nothing(staff_client, failing_delivery):
    listed = staff_client.get("/admin/notifications/delivery/?status__exact=pending&channel__exact=webhook").content.decode()
    assert failing_delivery.message_id in listed and "https://93.184.215.14/hook" in listed
    change_url = reverse("admin:notifications_delivery_change", args=[failing_delivery.pk])
    page = staff_client.get(change_url).content.decode()
    assert 'name="_save"' not in page and "The endpoint answered 500." in page
    assert staff_client.post(change_url, {"status": "delivered"}).status_code == 403
    assert staff_client.get(reverse("admin:notifications_delivery_add")).status_code == 403
    assert staff_client.post(reverse("admin:notifications_delivery_delete", args=[failing_delivery.pk]), {"post": "yes"}).status_code == 403
    assert Delivery.objects.get(pk=failing_delivery.pk).status == "pending"
    endpoint_page = staff_client.get(reverse("admin:notifications_webhookendpoint_change", args=[failing_delivery.endpoint_id])).content.decode()
    assert "whsec_" not in endpoint_page  # the signing secret is the owner's
