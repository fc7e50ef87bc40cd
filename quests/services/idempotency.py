"""Idempotent creation: the same `key` with the same body replays the original resource; the same
key with a different body is refused."""

from typing import Any

from checkpoints.services import canonical_json, sha256_hex
from quests.models import IdempotentRequest
from quests.services.errors import Conflict


def request_hash(body: dict[str, Any]) -> str:
    return sha256_hex(canonical_json({k: v for k, v in body.items() if k != "key"}))


def key_reuse(key: str) -> Conflict:
    return Conflict(
        f"The key “{key}” was already used with a different request; use a new key for a new request.",
        code="key_reuse",
        key=key,
    )


def replayed_id(*, owner, scope: str, key: str | None, body: dict[str, Any]) -> int | None:
    """The id of the object this key already created, or None for a new key."""
    if not key:
        return None
    existing = IdempotentRequest.objects.filter(owner=owner, scope=scope, key=key).first()
    if existing is None:
        return None
    if existing.request_hash != request_hash(body):
        raise key_reuse(key)
    return existing.object_id


def remember(*, owner, scope: str, key: str | None, body: dict[str, Any], object_id: int) -> None:
    if key:
        IdempotentRequest.objects.create(
            owner=owner, scope=scope, key=key, request_hash=request_hash(body), object_id=object_id
        )
