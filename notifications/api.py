"""People API for webhooks: `/api/v1/webhooks…`. Session only; an agent token gets 403 (the
services call `require_person`). Mounted on the one NinjaAPI by config/urls.py."""

from datetime import datetime
from typing import Annotated, Literal

from django.http import HttpRequest
from ninja import Router, Schema, Status
from pydantic import Field

from notifications import services
from notifications.models import EventKind
from quests.api.auth import actor
from quests.api.responses import ACT, BODY, READ, answers
from quests.api.schemas import In, text

router = Router(tags=["webhooks"])


class WebhookIn(In):
    url: text(max_length=2000)
    # The kinds themselves, at least one: the document says what the server accepts.
    events: Annotated[list[Literal[tuple(EventKind.values)]], Field(min_length=1, max_length=len(EventKind.values))]
    format: Literal["standard", "slack"] = "standard"


class WebhookOut(Schema):
    id: int
    url: str
    events: list[str]
    format: str
    created_at: datetime
    disabled_at: datetime | None
    disabled_reason: str


class WebhookCreatedOut(WebhookOut):
    secret: str


class WebhookListOut(Schema):
    items: list[WebhookOut]


class DeliveryOut(Schema):
    id: int
    event: str
    event_id: str
    webhook_id: str
    status: str
    attempts: int
    response_status: int | None
    last_error: str
    delivered_at: datetime | None
    next_attempt_at: datetime | None


class DeliveryListOut(Schema):
    items: list[DeliveryOut]


class RemovedOut(Schema):
    id: int
    removed: bool


def _delivery(row) -> dict:
    pending = row.status == "pending"
    return {
        "id": row.pk,
        "event": row.notification.kind,
        "event_id": str(row.notification.event_id),
        "webhook_id": row.message_id,
        "status": row.status,
        "attempts": row.attempts,
        "response_status": row.response_status,
        "last_error": row.last_error,
        "delivered_at": row.delivered_at,
        "next_attempt_at": row.next_attempt_at if pending else None,
    }


@router.post("/webhooks", response=answers({201: WebhookCreatedOut}, *ACT, *BODY))
def webhook_create(request: HttpRequest, body: WebhookIn):
    endpoint = services.webhook_create(actor=actor(request), url=body.url, events_wanted=body.events, format=body.format)
    return Status(201, endpoint)


@router.get("/webhooks", response=answers(WebhookListOut, *READ, 403))
def webhook_list(request: HttpRequest):
    return {"items": services.webhook_list(actor=actor(request))}


@router.delete("/webhooks/{int:webhook_id}", response=answers(RemovedOut, *ACT, 404))
def webhook_delete(request: HttpRequest, webhook_id: int):
    services.webhook_delete(actor=actor(request), endpoint_id=webhook_id)
    return {"id": webhook_id, "removed": True}


@router.post("/webhooks/{int:webhook_id}/test", response=answers({202: DeliveryOut}, *ACT, 404, 422))
def webhook_test(request: HttpRequest, webhook_id: int):
    return Status(202, _delivery(services.webhook_test(actor=actor(request), endpoint_id=webhook_id)))


@router.get("/webhooks/{int:webhook_id}/deliveries", response=answers(DeliveryListOut, *READ, 403, 404))
def webhook_deliveries(request: HttpRequest, webhook_id: int):
    return {"items": [_delivery(row) for row in services.webhook_deliveries(actor=actor(request), endpoint_id=webhook_id)]}
