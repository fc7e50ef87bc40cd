"""Email: QUESTLOG_EMAIL_URL read into MAILERS, and mails that a real SMTP server (aiosmtpd, on
loopback) receives, with a stable Message-ID, text and HTML, the links a person needs and an
unsubscribe link that acts only on a POST."""

import re
from pathlib import Path

import pytest

from config.email import mailers
from notifications.delivery import Outcome, delivery_send
from notifications.models import Delivery, Notification, NotificationPreference
from quests.models import PersonSettings
from tests.notification_receivers import SmtpServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def smtp(settings, alice):
    alice.email = "alice@example.com"
    alice.save()
    with SmtpServer() as server:
        settings.MAILERS = mailers(f"smtp://127.0.0.1:{server.port}", Path("/unused"))
        settings.QUESTLOG_EMAIL_FROM = "Questlog <quests@example.com>"
        yield server


def send_pending_mail() -> list[str]:
    pending = Delivery.objects.filter(status="pending", channel="email").order_by("pk").values_list("pk", flat=True)
    return [delivery_send(delivery_id=pk)[0] for pk in pending]


def test_an_approval_request_reaches_its_owner_over_smtp(smtp, agent, run, client):
    response = agent.post(
        f"runs/{run['id']}/approvals",
        {
            "action": "send_email",
            "payload": {"to": "client@example.com"},
            "reason": "The client asked for a quote",
            "expires_at": "2030-05-01T17:00:00Z",
        },
    )
    approval = response.json()
    assert send_pending_mail() == [Outcome.DELIVERED]
    [mail] = smtp.messages
    assert mail["To"] == "alice@example.com" and mail["From"] == "Questlog <quests@example.com>"
    assert mail["Subject"] == "Approval needed: Book the offsite — Approve or reject “send_email”"
    delivery = Delivery.objects.get(channel="email")
    assert mail["Message-ID"] == f"<{delivery.message_id}@localhost>"
    text = mail.get_body(("plain",)).get_content()
    html = mail.get_body(("html",)).get_content()
    assert "The client asked for a quote" in text and "Respond by: May 1, 2030, 17:00 UTC" in text
    assert f"http://localhost:8000/approvals/#approval-{approval['id']}" in text
    assert "client@example.com" not in text + html  # the payload stays in Questlog
    assert "<script" not in html
    links = set(re.findall(r'href="([^"]+)"', html))
    unsubscribe = next(link for link in links if "/unsubscribe/" in link)
    assert mail["List-Unsubscribe"] == f"<{unsubscribe}>"
    # Every link only shows a page; the unsubscribe link asks first and acts on its POST.
    path = unsubscribe.removeprefix("http://localhost:8000")
    assert client.get(path).status_code == 200
    assert not NotificationPreference.objects.exists()
    assert client.post(path).status_code == 200
    assert NotificationPreference.objects.get().mode == "off"
    assert client.get(path.replace("/unsubscribe/", "/unsubscribe/x")).status_code == 404


def test_the_respond_by_time_is_written_in_the_persons_zone(smtp, agent, run, alice):
    PersonSettings.objects.create(user=alice, time_zone="America/New_York")
    agent.post(f"runs/{run['id']}/approvals", {"action": "pay", "payload": {}, "reason": "r", "expires_at": "2030-05-01T17:00:00Z"})
    send_pending_mail()
    assert "Respond by: May 1, 2030, 13:00 EDT" in smtp.messages[0].get_body(("plain",)).get_content()


def test_a_second_send_of_the_same_event_carries_the_same_message_id(smtp, agent, run):
    agent.post(f"runs/{run['id']}/milestones", {"kind": "draft_ready", "title": "Draft ready", "summary": "Two venues", "gate": True})
    assert send_pending_mail() == [Outcome.DELIVERED]
    # As after a worker that sent and died before recording it: the delivery is sent again.
    Delivery.objects.update(status="pending")
    assert send_pending_mail() == [Outcome.DELIVERED]
    first, second = smtp.messages
    assert first["Message-ID"] == second["Message-ID"]
    assert first["Subject"] == "Milestone to review: Book the offsite — Review the milestone “Draft ready”"


def test_an_unreachable_mail_server_is_retried(settings, alice, agent, run):
    alice.email = "alice@example.com"
    alice.save()
    settings.MAILERS = mailers("smtp://127.0.0.1:1", Path("/unused"))
    agent.post(f"runs/{run['id']}/approvals", {"action": "send_email", "payload": {}, "reason": "r"})
    assert send_pending_mail() == [Outcome.RETRY]
    delivery = Delivery.objects.get(channel="email")
    assert (delivery.status, delivery.attempts) == ("pending", 1) and "Connection" in delivery.last_error


def test_a_kind_turned_off_sends_no_mail(smtp, agent, run, alice):
    NotificationPreference.objects.create(owner=alice, kind="approval.requested", mode="off")
    agent.post(f"runs/{run['id']}/approvals", {"action": "send_email", "payload": {}, "reason": "r"})
    assert Notification.objects.get(kind="approval.requested").deliveries.count() == 0
    assert send_pending_mail() == []


@pytest.mark.parametrize(
    ("url", "backend", "options"),
    [
        (
            "smtp://u:p%40ss@mail.example.com:2525",
            "smtp",
            {"host": "mail.example.com", "port": 2525, "username": "u", "password": "p@ss", "use_ssl": False, "use_tls": False, "timeout": 10},
        ),
        (
            "smtp://mail.example.com?tls=1",
            "smtp",
            {"host": "mail.example.com", "port": 587, "username": "", "password": "", "use_ssl": False, "use_tls": True, "timeout": 10},
        ),
        (
            "smtps://u:p@mail.example.com",
            "smtp",
            {"host": "mail.example.com", "port": 465, "username": "u", "password": "p", "use_ssl": True, "use_tls": False, "timeout": 10},
        ),
        ("console:", "console", {}),
        ("file:", "filebased", {"file_path": "/data/mail"}),
        ("file:///srv/mail", "filebased", {"file_path": "/srv/mail"}),
    ],
)
def test_the_email_url_becomes_the_default_mailer(url, backend, options):
    default = mailers(url, Path("/data"))["default"]
    assert default == {"BACKEND": f"django.core.mail.backends.{backend}.EmailBackend", "OPTIONS": options}


def test_an_unknown_email_scheme_stops_the_settings():
    with pytest.raises(ValueError, match="unknown scheme"):
        mailers("pigeon://coop", Path("/data"))
