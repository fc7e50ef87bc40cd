"""The engine's outbox: notifications of one kind for one person and their deliveries, in one
statement on PostgreSQL (`sql.outbox.EMIT_PG`), in the caller's transaction. The rules (which
events are new, the mode, who is delivered to) are `notifications.events.emit_many`'s; on SQLite
it writes them through the ORM, and this is what it runs on PostgreSQL."""

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from quests.engine import runner
from quests.engine.sql import outbox as outbox_sql


@dataclass(frozen=True)
class Emitted:
    """A notification the statement made (the events emitted before are left out)."""

    id: int
    event_id: uuid.UUID
    dedupe_key: str
    in_digest: bool


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
) -> tuple[list[Emitted], list[int]]:
    """Write the notifications of `events` ((dedupe key, event id, data) each) not emitted before,
    and their deliveries: (the notifications made, the deliveries' ids). `mode` None: the person's
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
    made = [Emitted(id=row[0], event_id=row[1], dedupe_key=row[2], in_digest=row[3]) for row in rows]
    return made, list(rows[0][4] or []) if rows else []
