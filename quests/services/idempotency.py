"""Idempotent creation: the same `key` with the same body replays the original resource; the same
key with a different body is refused.

One primitive for every keyed endpoint:
- the lookup rides in the statement that locks the mission (the engine's `lock_run`/`lock_mission`:
  `keyed` before, `replayed` after); mission create, which has no mission to lock yet, looks up
  before it inserts;
- one race policy, `retried_on_key_race`;
- one owner rule: a key belongs to the account that owns the mission it acts on (for mission create,
  the account that will own it), in the mission's scope `m<id>:<kind>`. Only the owner and the
  owner's tokens can see a mission, so the acting user and the owner are the same account; keeping
  the mission's owner makes that a property of the row, not of who asked."""

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import IntegrityError

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


def keyed_canonical(suffix: str, key: str | None, canonical_body: bytes) -> Key:
    """`keyed`, for a caller that has its body's canonical JSON (without the key) at hand already."""
    return Key(suffix=suffix, key=key or None, request_hash=sha256_hex(canonical_body) if key else "")


def replayed(key: Key, found: tuple[int | None, str | None]) -> int | None:
    """What the lock's lookup found for `key`: the earlier object's id, or None for a new key.
    The same key with a different body is refused."""
    object_id, earlier_hash = found
    if not key.key or object_id is None:
        return None
    if earlier_hash != key.request_hash:
        raise key_reuse(key.key)
    return object_id


def remember_keyed(key: Key, *, mission, object_id: int) -> None:
    """Remember `key` for what it made, for a write that does not remember it in an engine
    statement (under the mission owner's account, in the mission's scope)."""
    if key.key:
        IdempotentRequest.objects.create(
            owner_id=mission.owner_id,
            scope=f"m{mission.pk}:{key.suffix}",
            key=key.key,
            request_hash=key.request_hash,
            object_id=object_id,
        )


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


# The unique constraints a second request with the same key runs into when it raced the first.
RACED_KEYS = ("idempotent_request_unique", "operation_key_unique_per_mission")


def retried_on_key_race(write: Callable[..., T]) -> Callable[..., T]:
    """The one race policy: the lookup reads what was committed when the locking statement
    started, so a request with the same key committed while this one waited for the lock is not
    seen. This one then either breaks the key's unique constraint, or finds its run ended by the
    first (an approval request, a gated milestone: the fence's `run_ended`). The write runs once
    more, and the second time the lookup finds the first request's object; a run that had really
    ended is refused again."""

    @functools.wraps(write)
    def once_more(*args: Any, **kwargs: Any) -> T:
        try:
            return write(*args, **kwargs)
        except IntegrityError as error:
            if not kwargs.get("key") or not any(name in str(error) for name in RACED_KEYS):
                raise
            return write(*args, **kwargs)
        except Conflict as refused:
            if not kwargs.get("key") or refused.code != "run_ended":
                raise
            return write(*args, **kwargs)

    return once_more
