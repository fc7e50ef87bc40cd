"""Notifications end to end with real Celery workers (subprocesses), a real SMTP server and a
real webhook receiver: a worker started the plain way delivers within seconds, and a worker
killed mid-delivery loses nothing while each (event, channel) keeps one id."""

import re
import threading
from collections.abc import Iterator

import pytest
from standardwebhooks.webhooks import Webhook

from notifications.models import Delivery
from tests.notification_receivers import HttpReceiver, SmtpServer
from tests.processes import Worker, wait_for

pytestmark = [pytest.mark.long, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_broker")]


@pytest.fixture
def receivers(alice, settings) -> Iterator[tuple[SmtpServer, HttpReceiver]]:
    alice.email = "alice@example.com"
    alice.save()
    settings.QUESTLOG_WEBHOOK_ALLOW_PRIVATE = True  # the receiver is on loopback
    with SmtpServer() as smtp, HttpReceiver() as http:
        yield smtp, http


def worker_env(smtp: SmtpServer) -> dict[str, str]:
    return {"QUESTLOG_EMAIL_URL": f"smtp://127.0.0.1:{smtp.port}", "QUESTLOG_WEBHOOK_ALLOW_PRIVATE": "1"}


def add_webhook(person, url: str) -> dict:
    response = person.post("webhooks", {"url": url, "events": ["approval.requested"]})
    assert response.status_code == 201, response.content
    return response.json()


def ask(agent, run) -> dict:
    response = agent.post(f"runs/{run['id']}/approvals", {"action": "send_email", "payload": {}, "reason": "The client asked"})
    assert response.status_code == 201, response.content
    return response.json()


def test_a_plain_worker_delivers_an_approval_by_email_and_verified_webhook_within_seconds(receivers, person, agent, run, tmp_path, processes):
    smtp, http = receivers
    worker = Worker(tmp_path, "plain", queues=None, **worker_env(smtp))
    processes.append(worker)
    assert re.search(r"\.> notifications +exchange=notifications\(direct\) key=notifications\n", worker.output())
    hook = add_webhook(person, http.url)
    approval = ask(agent, run)
    wait_for(lambda: smtp.messages and http.received, 15, "the email and the webhook")
    payload = Webhook(hook["secret"]).verify(http.received[0].body, http.received[0].headers)
    assert (payload["type"], payload["data"]["approval"]["id"]) == ("approval.requested", approval["id"])
    assert smtp.messages[0]["Subject"].startswith("Approval needed: Book the offsite")
    wait_for(lambda: set(Delivery.objects.values_list("status", flat=True)) == {"delivered"}, 10, "both deliveries recorded")


def test_a_worker_killed_mid_delivery_loses_nothing_and_each_event_and_channel_keeps_one_id(receivers, person, agent, run, tmp_path, processes):
    smtp, http = receivers
    http.hold = threading.Event()  # the first webhook request waits for its answer until the test says
    add_webhook(person, http.url)
    doomed = Worker(tmp_path, "doomed", queues=None, QUESTLOG_NOTIFY_LEASE="2", **worker_env(smtp))
    processes.append(doomed)
    ask(agent, run)
    assert http.arrived.wait(15), "the webhook never arrived"
    doomed.kill()  # mid-delivery: the request was sent, its answer never read
    http.hold.set()
    webhook = Delivery.objects.get(channel="webhook")
    assert (webhook.status, webhook.attempts) == ("pending", 1)

    processes.append(Worker(tmp_path, "rescuer", queues=None, beat=True, QUESTLOG_NOTIFY_LEASE="2", QUESTLOG_NOTIFY_SWEEP_INTERVAL="1", **worker_env(smtp)))
    wait_for(lambda: set(Delivery.objects.values_list("status", flat=True)) == {"delivered"}, 45, "every delivery after the crash")
    webhook.refresh_from_db()
    assert webhook.attempts == 2
    assert len(http.received) == 2
    assert {r.headers["webhook-id"] for r in http.received} == {webhook.message_id}  # the receiver drops the repeat by its id
    email = Delivery.objects.get(channel="email")
    assert {m["Message-ID"] for m in smtp.messages} == {f"<{email.message_id}@localhost>"}
