"""Idempotent creation: the same `key` with the same body replays the original resource; the same
key with a different body is refused."""

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import IntegrityError
from django.db.models import CharField, OuterRef, Subquery, Value
from django.db.models.functions import Cast, Concat

from checkpoints.roundtrip import RoundTrip
from checkpoints.services import canonical_json, sha256_hex
from quests.engine.writes import Key
from quests.models import IdempotentRequest
from quests.services.errors import Conflict

T = TypeVar("T")


def request_hash(body: dict[str, Any]) -> str:
    return sha256_hex(canonical_json({k: v for k, v in body.items() if k != "key"}))


def key_reuse(key: str) -> Conflict:
    return Conflict(
        f"The key “{key}” was already used with a different request; use a new key for a new request.",
        code="key_reuse",
        key=key,
    )


def keyed(suffix: str, key: str | None, body: dict[str, Any]) -> Key:
    """The key of a write on a mission (`suffix` names what it makes: `checkpoints`, `runs`, …).
    The engine looks it up in the statement that locks the mission and remembers it in the
    statement that writes (see the module's docstring for the rules)."""
    return Key(suffix=suffix, key=key or None, request_hash=request_hash(body) if key else "")


def replayed(key: Key, found: tuple[int | None, str | None]) -> int | None:
    """What the lock's lookup found for `key`: the earlier object's id, or None for a new key.
    The same key with a different body is refused."""
    object_id, earlier_hash = found
    if not key.key or object_id is None:
        return None
    if earlier_hash != key.request_hash:
        raise key_reuse(key.key)
    return object_id


def replayed_id(*, owner, scope: str, key: str | None, body: dict[str, Any]) -> int | None:
    """The id of the object this key already created, or None for a new key."""
    if not key:
        return None
    existing = IdempotentRequest.objects.filter(owner=owner, scope=scope, key=key).first()
    if existing is None:
        return None
    return _replayed(existing.object_id, existing.request_hash, key, body)


def _replayed(object_id: int, earlier_hash: str, key: str, body: dict[str, Any]) -> int:
    """The earlier object, if the key came with the same body; a different body is refused."""
    if earlier_hash != request_hash(body):
        raise key_reuse(key)
    return object_id


def _row(*, owner_id: int, scope: str, key: str, body: dict[str, Any], object_id: Any) -> IdempotentRequest:
    return IdempotentRequest(owner_id=owner_id, scope=scope, key=key, request_hash=request_hash(body), object_id=object_id)


def remember(*, owner, scope: str, key: str | None, body: dict[str, Any], object_id: int) -> None:
    if key:
        _row(owner_id=getattr(owner, "pk", owner), scope=scope, key=key, body=body, object_id=object_id).save()


class Lookup:
    """An idempotency lookup that rides along in the statement that locks the mission (see
    `locking.lock_run`), for the writes an agent sends many times a second. The scope is the
    mission's (`m<id>:<suffix>`), as for `replayed_id`.

    The lookup reads what was committed when the statement started; a request with the same key
    committed while this one waited for the lock is not seen, and this one's `remember` then
    breaks the unique constraint: `retried_on_key_race` runs the write again, and the second
    time the lookup finds the first request's object."""

    def __init__(self, *, owner_id: int, suffix: str, key: str | None, body: dict[str, Any]) -> None:
        self.owner_id = owner_id
        self.suffix = suffix
        self.key = key
        self.body = body
        self.found: tuple[int | None, str | None] = (None, None)

    def annotations(self, mission_field: str) -> dict[str, Any]:
        if not self.key:
            return {}
        scope = Concat(Value("m"), Cast(OuterRef(mission_field), CharField()), Value(f":{self.suffix}"), output_field=CharField())
        earlier = IdempotentRequest.objects.filter(owner_id=self.owner_id, key=self.key, scope=scope)
        return {
            "replay_object_id": Subquery(earlier.values("object_id")[:1]),
            "replay_request_hash": Subquery(earlier.values("request_hash")[:1]),
        }

    def read(self, row: Any) -> None:
        if self.key:
            self.found = (row.replay_object_id, row.replay_request_hash)

    def replayed_id(self) -> int | None:
        object_id, earlier_hash = self.found
        if object_id is None:
            return None
        return _replayed(object_id, earlier_hash, self.key, self.body)

    def remember(self, *, mission_id: int, object_id: Any, trip: RoundTrip) -> None:
        """`object_id` may be an expression (the id of a row inserted earlier in the same trip)."""
        if self.key:
            row = _row(owner_id=self.owner_id, scope=f"m{mission_id}:{self.suffix}", key=self.key, body=self.body, object_id=object_id)
            trip.insert(row, returning=False)


# The unique constraints a second request with the same key runs into when it raced the first.
RACED_KEYS = ("idempotent_request_unique", "operation_key_unique_per_mission")


def retried_on_key_race(write: Callable[..., T]) -> Callable[..., T]:
    """Run a write once more when its `remember` lost a race for the same key (see `Lookup`)."""

    @functools.wraps(write)
    def once_more(*args: Any, **kwargs: Any) -> T:
        try:
            return write(*args, **kwargs)
        except IntegrityError as error:
            if not kwargs.get("key") or not any(name in str(error) for name in RACED_KEYS):
                raise
            return write(*args, **kwargs)

    return once_more
