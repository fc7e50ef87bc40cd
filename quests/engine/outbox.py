"""The engine's outbox: notifications of one kind for one person and their deliveries, in one
statement on PostgreSQL (`sql.outbox.EMIT_PG`), in the caller's transaction. The rules (which
events are new, the mode, who is delivered to) are `notifications.events.emit_many`'s; on SQLite
it writes them through the ORM, and this is what it runs on PostgreSQL."""

import uuid
from datetime import datetime
from typing import Any

from notifications.models import Notification
from quests.engine import runner
from quests.engine.sql import outbox as outbox_sql


def emit(
    *,
    kind: str,
    owner_id: int,
    mission_id: int | None,
    events: list[tuple[str, uuid.UUID, dict[str, Any]]],
    mode: str | None,
    default_mode: str,
    endpoint_ids: list[int] | None,
    now: datetime,
) -> tuple[list[Notification], list[int]]:
    """Write the notifications of `events` ((dedupe key, event id, data) each) not emitted before,
    and their deliveries: (the notifications made, in order, the deliveries' ids). `mode` None: the person's
    preference, else `default_mode`; `endpoint_ids` None: the person's enabled endpoints that want
    the kind."""
    rows = runner.fetch(
        outbox_sql.EMIT_PG,
        {
            "kind": kind,
            "owner_id": owner_id,
            "mission_id": mission_id,
            "dedupe_keys": [key for key, _, _ in events],
            "event_ids": [event_id for _, event_id, _ in events],
            "datas": [runner.json_text(data) for _, _, data in events],
            "mode": mode,
            "default_mode": default_mode,
            "endpoint_ids": endpoint_ids,
            "now": now,
        },
    )
    width = len(Notification._meta.concrete_fields)
    return [runner.model_from_row(Notification, row[:width]) for row in rows], list(rows[0][width] or []) if rows else []
