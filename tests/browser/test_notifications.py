"""The notifications page in Chromium: add a webhook (its secret shown once), send it a test
event and see the delivery, be refused a private address, choose how each event is sent, remove
the webhook."""

import json

import pytest
from playwright.sync_api import expect

from notifications.delivery import delivery_send
from notifications.models import Delivery, NotificationPreference, WebhookEndpoint
from tests.notification_receivers import HttpReceiver

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_person_manages_webhooks_and_preferences_on_the_page(page, open_page, login, alice, settings):
    login(alice)
    open_page("/settings/")
    page.get_by_role("link", name="Notifications: email, daily digest and webhooks").click()
    expect(page.get_by_role("heading", name="Notifications", level=1)).to_be_visible()

    page.get_by_label("URL").fill("http://169.254.169.254/latest/meta-data/")
    page.get_by_role("button", name="Add webhook").click()
    expect(page.get_by_role("alert")).to_contain_text("link-local")
    assert not WebhookEndpoint.objects.exists()

    settings.QUESTLOG_WEBHOOK_ALLOW_PRIVATE = True  # the receiver below is on loopback
    with HttpReceiver() as receiver:
        page.get_by_label("URL").fill(receiver.url)
        page.get_by_role("checkbox", name="A quest is completed").check()
        page.get_by_role("button", name="Add webhook").click()
        secret = page.get_by_label("Signing secret")
        expect(secret).to_have_value(WebhookEndpoint.objects.get().secret)
        assert WebhookEndpoint.objects.get().events == ["approval.requested", "milestone.awaiting_review", "mission.completed"]
        page.reload()
        expect(page.get_by_label("Signing secret")).to_have_count(0)  # shown once

        page.get_by_role("button", name="Send a test event").click()
        expect(page.get_by_role("status").filter(has_text="test event is on its way")).to_be_visible()
        delivery_send(delivery_id=Delivery.objects.get().pk)  # what a worker does
        assert json.loads(receiver.received[0].body)["type"] == "webhook.test"
    page.reload()
    deliveries = page.get_by_role("table", name=f"Recent deliveries to {receiver.url}")
    expect(deliveries).to_contain_text("webhook.test")
    expect(deliveries).to_contain_text("Delivered")

    page.get_by_role("radio", name="A quest is completed: Immediately").check()
    page.get_by_role("radio", name="An approval is requested: Off").check()
    page.get_by_role("button", name="Save choices").click()
    expect(page.get_by_role("status").filter(has_text="choices are saved")).to_be_visible()
    assert dict(NotificationPreference.objects.values_list("kind", "mode")) == {
        "approval.requested": "off",
        "approval.expiring": "immediately",
        "milestone.awaiting_review": "immediately",
        "mission.blocked": "digest",
        "mission.failed": "digest",
        "mission.completed": "immediately",
        "run.stalled": "digest",
    }
    expect(page.get_by_role("radio", name="A quest is completed: Immediately")).to_be_checked()

    page.get_by_role("button", name=f"Remove the webhook {receiver.url}").click()
    expect(page.get_by_text("No webhooks yet.")).to_be_visible()
    assert not WebhookEndpoint.objects.exists()
