"""People's webhooks: the API (session only), signed deliveries checked by a real receiver with
the standardwebhooks library, the Slack format, retries with backoff, giving up after a day, and
the SSRF refusals."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from notifications.delivery import Outcome, backoff_seconds, delivery_send
from notifications.models import Delivery, Notification, WebhookEndpoint
from tests.notification_receivers import HttpReceiver

pytestmark = pytest.mark.django_db


@pytest.fixture
def allow_private(settings):
    settings.QUESTLOG_WEBHOOK_ALLOW_PRIVATE = True


def add_webhook(person, url: str, events=("approval.requested",), format="standard"):
    return person.post("webhooks", {"url": url, "events": list(events), "format": format})


def ask(agent, run, action="send_email") -> dict:
    response = agent.post(f"runs/{run['id']}/approvals", {"action": action, "payload": {"secret": "agent-only"}, "reason": "The client asked"})
    assert response.status_code == 201, response.content
    return response.json()


def deliver_all() -> list[str]:
    """Every pending webhook delivery, sent now (alice has no email address: her mails are skipped)."""
    pending = Delivery.objects.filter(status="pending", channel="webhook").order_by("pk").values_list("pk", flat=True)
    return [delivery_send(delivery_id=pk)[0] for pk in pending]


def test_it_delivers_a_signed_approval_request_that_the_receiver_verifies(person, agent, mission, run, allow_private):
    with HttpReceiver() as receiver:
        created = add_webhook(person, receiver.url)
        assert created.status_code == 201, created.content
        hook = created.json()
        assert hook["secret"].startswith("whsec_") and hook["events"] == ["approval.requested"] and hook["format"] == "standard"
        approval = ask(agent, run)
        assert deliver_all() == [Outcome.DELIVERED]
    [got] = receiver.received
    payload = Webhook(hook["secret"]).verify(got.body, got.headers)
    assert payload["type"] == "approval.requested"
    assert payload["data"]["approval"] == {"id": approval["id"], "action": "send_email", "reason": "The client asked", "respond_by": None}
    assert payload["data"]["mission"]["title"] == "Book the offsite"
    assert payload["data"]["url"].endswith(f"/approvals/#approval-{approval['id']}")
    assert "agent-only" not in got.body.decode() and "agent_state" not in got.body.decode()  # never the payload or agent state
    delivery = Delivery.objects.get(channel="webhook")
    assert got.headers["webhook-id"] == delivery.message_id
    listed = person.get(f"webhooks/{hook['id']}/deliveries").json()["items"]
    assert [(d["event"], d["status"], d["attempts"], d["response_status"]) for d in listed] == [("approval.requested", "delivered", 1, 204)]
    assert listed[0]["delivered_at"] and listed[0]["next_attempt_at"] is None


def test_a_forged_or_altered_delivery_fails_verification(person, agent, run, allow_private):
    from standardwebhooks.webhooks import WebhookVerificationError

    with HttpReceiver() as receiver:
        hook = add_webhook(person, receiver.url).json()
        ask(agent, run)
        deliver_all()
    [got] = receiver.received
    with pytest.raises(WebhookVerificationError):
        Webhook(hook["secret"]).verify(got.body.replace(b"send_email", b"wire_money"), got.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 43 + "=").verify(got.body, got.headers)


def test_the_slack_format_posts_text_with_a_link(person, agent, run, allow_private):
    with HttpReceiver(status=200) as receiver:
        add_webhook(person, receiver.url, format="slack")
        ask(agent, run)
        deliver_all()
    body = json.loads(receiver.received[0].body)
    assert set(body) == {"text"}
    assert "Book the offsite" in body["text"] and "|Open in Questlog>" in body["text"]


def test_it_lists_tests_and_removes_webhooks_and_only_for_their_owner(person, bob_person, allow_private):
    with HttpReceiver() as receiver:
        hook = add_webhook(person, receiver.url, events=["mission.completed", "approval.requested"]).json()
        listed = person.get("webhooks").json()["items"]
        assert [(h["id"], h["events"]) for h in listed] == [(hook["id"], ["approval.requested", "mission.completed"])]
        assert "secret" not in listed[0]
        assert bob_person.get("webhooks").json()["items"] == []
        assert bob_person.post(f"webhooks/{hook['id']}/test").status_code == 404
        tested = person.post(f"webhooks/{hook['id']}/test")
        assert tested.status_code == 202 and tested.json()["event"] == "webhook.test"
        assert deliver_all() == [Outcome.DELIVERED]
        assert json.loads(receiver.received[0].body)["type"] == "webhook.test"
    assert bob_person.delete(f"webhooks/{hook['id']}").status_code == 404
    assert person.delete(f"webhooks/{hook['id']}").json() == {"id": hook["id"], "removed": True}
    assert person.get("webhooks").json()["items"] == []
    assert person.get(f"webhooks/{hook['id']}/deliveries").status_code == 404


def test_agent_tokens_are_refused(agent):
    for response in (agent.get("webhooks"), agent.post("webhooks", {"url": "https://example.com/h", "events": ["approval.requested"]})):
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "forbidden"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://localhost:8000/hook",
        "http://[::1]/hook",
        "http://10.0.0.8/hook",
        "http://192.168.1.1/hook",
        "http://172.16.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://0.0.0.0/",
        "http://[::ffff:127.0.0.1]/",
        "http://2130706433/",
        "http://100.64.0.1/",
        "http://[fd00:ec2::254]/",
    ],
)
def test_private_loopback_link_local_and_metadata_addresses_are_refused(person, url):
    response = add_webhook(person, url)
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("address_refused", "url")
    assert not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://example.com/x", "events": ["approval.requested"]}, "url"),
        ({"url": "https://user:pw@example.com/x", "events": ["approval.requested"]}, "url"),
        ({"url": "https://example.com/x", "events": []}, "events"),
        ({"url": "https://example.com/x", "events": ["approval.eaten"]}, "events.0"),  # the schema names the item it refuses
        ({"url": "https://example.com/x", "events": ["approval.requested"], "format": "teams"}, "format"),
    ],
)
def test_bad_webhook_bodies_get_a_clear_422(person, body, field):
    response = person.post("webhooks", body)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == field


def test_an_address_allowed_at_registration_is_checked_again_at_delivery(person, agent, run, settings):
    settings.QUESTLOG_WEBHOOK_ALLOW_PRIVATE = True
    with HttpReceiver() as receiver:
        add_webhook(person, receiver.url)
        settings.QUESTLOG_WEBHOOK_ALLOW_PRIVATE = False
        ask(agent, run)
        assert deliver_all() == [Outcome.RETRY]
    assert receiver.received == []
    assert "loopback, private" in Delivery.objects.get(channel="webhook").last_error


def test_a_redirect_is_not_followed_and_a_failure_is_retried_with_growing_backoff(person, agent, run, allow_private):
    with HttpReceiver(status=302, location="http://127.0.0.1:1/elsewhere") as receiver:
        add_webhook(person, receiver.url)
        ask(agent, run)
        before = timezone.now()
        assert deliver_all() == [Outcome.RETRY]
        delivery = Delivery.objects.get(channel="webhook")
        assert (delivery.status, delivery.attempts, delivery.response_status) == ("pending", 1, 302)
        assert "redirect" in delivery.last_error
        assert delivery.next_attempt_at >= before + timedelta(seconds=backoff_seconds(1))
        assert delivery_send(delivery_id=delivery.pk)[0] == Outcome.NOT_DUE  # an early duplicate message does nothing
        Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
        assert delivery_send(delivery_id=delivery.pk) == (Outcome.RETRY, backoff_seconds(2))
    assert len(receiver.received) == 2
    assert len({r.headers["webhook-id"] for r in receiver.received}) == 1  # the same id on every attempt
    assert [backoff_seconds(n) for n in range(1, 6)] == [30, 60, 120, 240, 480]


def test_after_a_day_of_failures_it_gives_up_disables_the_endpoint_and_emails_the_person(person, agent, run, alice, allow_private):
    alice.email = "alice@example.com"
    alice.save()
    with HttpReceiver(status=500) as receiver:
        hook = add_webhook(person, receiver.url).json()
        ask(agent, run)
        webhook = Delivery.objects.get(channel="webhook")
        Delivery.objects.filter(pk=webhook.pk).update(first_attempt_at=timezone.now() - timedelta(hours=23, minutes=59, seconds=45))
        assert delivery_send(delivery_id=webhook.pk)[0] == Outcome.GAVE_UP
    endpoint = WebhookEndpoint.objects.get(pk=hook["id"])
    assert endpoint.disabled_at is not None and "500" in endpoint.disabled_reason
    told = Notification.objects.get(kind="webhook.disabled")
    assert list(told.deliveries.values_list("channel", flat=True)) == ["email"]
    assert person.get("webhooks").json()["items"][0]["disabled_at"] is not None
    assert person.post(f"webhooks/{hook['id']}/test").status_code == 422
