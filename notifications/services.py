"""What a person does with their notifications: webhook endpoints (add, list, remove, test, see
deliveries) and their choice per event kind. People only: an agent token gets 403."""

import base64
import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from notifications import addresses, events
from notifications.models import DEFAULT_MODES, Delivery, EventKind, Format, Mode, NotificationPreference, WebhookEndpoint
from quests.services.access import require_person
from quests.services.audit import Actor
from quests.services.errors import InvalidInput, NotFound, ServiceError

MAX_ENDPOINTS = 20
DELIVERIES_SHOWN = 50


class AddressRefused(ServiceError):
    """422 with the reason a URL may not be called (SSRF guard) or not be resolved."""

    status = 422
    code = "address_refused"


def webhook_create(*, actor: Actor, url: str, events_wanted: list[str], format: str = Format.STANDARD) -> WebhookEndpoint:
    """The new endpoint, with its signing secret (`whsec_…`), which the caller shows once."""
    require_person(actor)
    if format not in Format.values:
        raise InvalidInput(f"format must be one of {', '.join(Format.values)}.", field="format")
    unknown = sorted(set(events_wanted) - set(EventKind.values))
    if not events_wanted or unknown:
        raise InvalidInput(
            f"events must name at least one of {', '.join(EventKind.values)}" + (f"; unknown: {', '.join(unknown)}." if unknown else "."), field="events"
        )
    if len(url) > 2000:
        raise InvalidInput("The URL can be at most 2,000 characters.", field="url")
    try:
        addresses.resolve(url)
    except addresses.Refused as exc:
        raise AddressRefused(exc.message, code=exc.code, field="url") from None
    if WebhookEndpoint.objects.filter(owner=actor.user).count() >= MAX_ENDPOINTS:
        raise InvalidInput(f"A person can have at most {MAX_ENDPOINTS} webhooks; remove one first.", field="url")
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    ordered = [kind for kind in EventKind.values if kind in events_wanted]
    return WebhookEndpoint.objects.create(owner=actor.user, url=url, events=ordered, format=format, secret=secret)


def webhook_list(*, actor: Actor) -> list[WebhookEndpoint]:
    require_person(actor)
    return list(WebhookEndpoint.objects.filter(owner=actor.user))


def _own(actor: Actor, endpoint_id: int) -> WebhookEndpoint:
    require_person(actor)
    endpoint = WebhookEndpoint.objects.filter(owner=actor.user, pk=endpoint_id).first()
    if endpoint is None:
        raise NotFound(f"No webhook with id {endpoint_id}.")
    return endpoint


def webhook_delete(*, actor: Actor, endpoint_id: int) -> None:
    _own(actor, endpoint_id).delete()


def webhook_test(*, actor: Actor, endpoint_id: int) -> Delivery:
    """A `webhook.test` event to this endpoint alone, delivered like any other."""
    endpoint = _own(actor, endpoint_id)
    if endpoint.disabled_at is not None:
        raise InvalidInput("This webhook is disabled; add it again once it works.", field="id")
    with transaction.atomic():
        notification = events.emit(
            kind="webhook.test",
            owner_id=actor.user.pk,
            dedupe_key=f"webhook.test:{endpoint.pk}:{timezone.now().isoformat()}",
            endpoints=[endpoint],
            email=False,
            data={
                "endpoint": {"id": endpoint.pk},
                "needed": "Nothing: this is a test",
                "reason": "Sent from the webhook settings.",
                "url": events.link("/settings/notifications/"),
            },
        )
        assert notification is not None  # its dedupe key is new (it holds the time), so emit made it
        return notification.deliveries.get()


def webhook_deliveries(*, actor: Actor, endpoint_id: int) -> list[Delivery]:
    endpoint = _own(actor, endpoint_id)
    return list(endpoint.deliveries.select_related("notification").order_by("-id")[:DELIVERIES_SHOWN])


def preferences_of(user: Any) -> dict[str, str]:
    chosen = dict(NotificationPreference.objects.filter(owner=user).values_list("kind", "mode"))
    return {kind: chosen.get(kind, DEFAULT_MODES[kind]) for kind in EventKind.values}


def preference_set(*, user: Any, kind: str, mode: str) -> None:
    if kind not in EventKind.values:
        raise InvalidInput(f"Unknown event kind “{kind}”.", field="kind")
    if mode not in Mode.values:
        raise InvalidInput(f"mode must be one of {', '.join(Mode.values)}.", field="mode")
    NotificationPreference.objects.update_or_create(owner=user, kind=kind, defaults={"mode": mode})


def unsubscribe(*, user_id: int, kind: str) -> bool:
    """An email's unsubscribe link: that kind of email off (the digest's: every kind it lists)."""
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None:
        return False
    if kind == "digest":
        kinds = [k for k, mode in preferences_of(user).items() if mode == Mode.DIGEST]
    else:
        kinds = [kind] if kind in EventKind.values else []
    for each in kinds:
        preference_set(user=user, kind=each, mode=Mode.OFF)
    return True
