"""The two channels: an email over Django's mail framework, and an HTTP POST signed as the
Standard Webhooks spec says (or a Slack-compatible message). Each returns a `Result`; neither
raises for anything the other end does."""

import json
import smtplib
import urllib.parse
from dataclasses import dataclass
from datetime import datetime

import httpx
from django.conf import settings
from django.core import signing
from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from notifications import addresses
from notifications.models import Channel, Delivery, EventKind, Format, Notification, WebhookEndpoint
from quests.services.preferences import moment, time_zone_of

UNSUBSCRIBE_SALT = "notifications.unsubscribe"
SUBJECTS = {
    EventKind.APPROVAL_REQUESTED: "Approval needed",
    EventKind.APPROVAL_EXPIRING: "Approval expiring soon",
    EventKind.MILESTONE_AWAITING_REVIEW: "Milestone to review",
    EventKind.MISSION_BLOCKED: "Quest blocked",
    EventKind.MISSION_FAILED: "Quest failed",
    EventKind.MISSION_COMPLETED: "Quest completed",
    EventKind.RUN_STALLED: "Run stalled",
    "webhook.test": "Test notification",
    "webhook.disabled": "Webhook disabled",
    "digest": "Your daily Questlog digest",
}


@dataclass(frozen=True)
class Result:
    ok: bool
    status: int | None = None
    error: str = ""


def send(delivery: Delivery) -> Result:
    if delivery.channel == Channel.EMAIL:
        return send_email(delivery)
    return send_webhook(delivery)


def subject(notification: Notification) -> str:
    what = SUBJECTS.get(notification.kind, notification.kind)
    mission = notification.data.get("mission")
    needed = notification.data.get("needed")
    if mission:
        return f"{what}: {mission['title']} — {needed}"[:200] if needed else f"{what}: {mission['title']}"[:200]
    return what


def unsubscribe_url(owner_id: int, kind: str) -> str:
    token = signing.dumps({"u": owner_id, "k": kind}, salt=UNSUBSCRIBE_SALT)
    return f"{settings.QUESTLOG_BASE_URL}/settings/notifications/unsubscribe/{token}/"


def email_message(delivery: Delivery) -> EmailMultiAlternatives:
    notification = delivery.notification
    context = {
        "notification": notification,
        "data": notification.data,
        "subject": subject(notification),
        "unsubscribe_url": unsubscribe_url(notification.owner_id, notification.kind),
        "settings_url": f"{settings.QUESTLOG_BASE_URL}/settings/notifications/",
        "respond_by": _moment(notification.data.get("approval", {}).get("respond_by"), notification.owner),
    }
    message = EmailMultiAlternatives(
        subject=context["subject"],
        body=render_to_string("notifications/email/notification.txt", context),
        from_email=settings.QUESTLOG_EMAIL_FROM,
        to=[notification.owner.email],
        headers={
            # The same on every attempt: a mail client drops the duplicate an at-least-once send makes.
            "Message-ID": f"<{delivery.message_id}@{_domain()}>",
            "List-Unsubscribe": f"<{context['unsubscribe_url']}>",
        },
    )
    message.attach_alternative(render_to_string("notifications/email/notification.html", context), "text/html")
    return message


def _moment(value: str | None, owner) -> str:
    """The respond-by time as the pages write it, in the zone the person chose (else the server's)."""
    if not value:
        return ""
    with timezone.override(time_zone_of(owner) or settings.TIME_ZONE):
        return moment(datetime.fromisoformat(value))


def _domain() -> str:
    return urllib.parse.urlsplit(settings.QUESTLOG_BASE_URL).hostname or "questlog.localhost"


def send_email(delivery: Delivery) -> Result:
    try:
        email_message(delivery).send(fail_silently=False)
    except (smtplib.SMTPException, OSError) as exc:
        return Result(False, error=f"{type(exc).__name__}: {exc}")
    return Result(True)


def webhook_endpoint(delivery: Delivery) -> WebhookEndpoint:
    """A webhook delivery's endpoint: every webhook delivery names one (only mail goes without)."""
    endpoint = delivery.endpoint
    assert endpoint is not None, f"webhook delivery {delivery.pk} has no endpoint"
    return endpoint


def webhook_body(delivery: Delivery) -> bytes:
    notification = delivery.notification
    if webhook_endpoint(delivery).format == Format.SLACK:
        data = notification.data
        text = subject(notification)
        if data.get("url"):
            text += f"\n<{data['url']}|Open in Questlog>"
        return json.dumps({"text": text}).encode()
    body = {"type": notification.kind, "timestamp": notification.created_at.isoformat(), "data": notification.data}
    return json.dumps(body, separators=(",", ":")).encode()


def signed_headers(delivery: Delivery, body: bytes) -> dict[str, str]:
    now = timezone.now()
    return {
        "content-type": "application/json",
        "user-agent": "Questlog-Webhooks/1",
        "webhook-id": delivery.message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(webhook_endpoint(delivery).secret).sign(delivery.message_id, now, body),
    }


def send_webhook(delivery: Delivery) -> Result:
    try:
        parts, address = addresses.resolve(webhook_endpoint(delivery).url)
    except addresses.Refused as exc:
        return Result(False, error=exc.message)
    body = webhook_body(delivery)
    headers = signed_headers(delivery, body)
    # Connect to the address just checked; the Host header and TLS name stay the URL's own.
    literal = f"[{address}]" if address.version == 6 else str(address)
    netloc = literal + (f":{parts.port}" if parts.port else "")
    target = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    headers["host"] = parts.netloc
    limit = settings.QUESTLOG_WEBHOOK_MAX_RESPONSE_BYTES
    try:
        with httpx.Client(timeout=settings.QUESTLOG_WEBHOOK_TIMEOUT, follow_redirects=False) as client:
            request = client.build_request("POST", target, content=body, headers=headers, extensions={"sni_hostname": parts.hostname})
            response = client.send(request, stream=True)
            try:
                read = 0
                for chunk in response.iter_bytes():  # read at most `limit` bytes of whatever it answers
                    read += len(chunk)
                    if read >= limit:
                        break
            finally:
                response.close()
    except httpx.HTTPError as exc:
        return Result(False, error=f"{type(exc).__name__}: {exc}"[:500])
    if 200 <= response.status_code < 300:
        return Result(True, status=response.status_code)
    if response.is_redirect:
        return Result(False, status=response.status_code, error="The endpoint answered with a redirect, which is not followed.")
    return Result(False, status=response.status_code, error=f"The endpoint answered {response.status_code}.")
