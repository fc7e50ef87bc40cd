"""Agent tokens: shown once, stored only as a sha256 hash."""

import hashlib
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from quests.engine import checkpoints as engine_checkpoints, operations as ledger, reads, writes
from quests.models import AgentToken, Mission, Run
from quests.services import throttle
from quests.services.audit import Actor, audit
from quests.services.errors import InvalidInput, NotFound, Unauthenticated
from quests.services.locking import caller, run_locked_or_404

TOKEN_PREFIX = "qlt_"
USE_RECORDED_EVERY = timedelta(minutes=1)


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def token_create(*, user, name: str = "", mission: Mission | None = None) -> tuple[AgentToken, str]:
    if mission is not None and mission.owner_id != user.pk:
        raise InvalidInput("A token can only be limited to one of its owner's missions.", field="mission")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = AgentToken.objects.create(user=user, mission=mission, name=name, token_hash=hash_token(raw), prefix=raw[:10])
    audit(actor=Actor(user=user), mission=mission, entity="agent_token", entity_id=token.pk, action="create", name=name)
    return token, raw


def token_request(raw: str, *, receipt: bool) -> AgentToken | None:
    """An agent's request: its token authenticated and, when valid, counted against its rate
    (quests.services.throttle; RateLimited past it, unless a `receipt`). Where the rate is counted
    in the database's cache, the count is taken by the statement that authenticates: one round trip."""
    return token_request_hashed(hash_token(raw), receipt=receipt)


def token_request_hashed(token_hash: str, *, receipt: bool, count: bool = True) -> AgentToken | None:
    """`token_request` for a token known by its hash; `count=False` for a request already counted
    (by a service's own statement that authenticated it, before it took a path that needs the token)."""
    counting = throttle.api_counting(token_hash) if count else None
    token = _authenticated(token_hash, counting)
    if token is not None and count:
        throttle.api_request_count(token.token_hash, receipt=receipt, counted=counting)
    return token


def credentials_actor(credentials: writes.Credentials, *, counted: bool) -> Actor:
    """Who an agent token's credentials stand for, for a service that was handed them (their
    request `counted` already, or not): Unauthenticated when the token is not valid."""
    token = token_request_hashed(credentials.token_hash, receipt=False, count=not counted)
    if token is None:
        raise Unauthenticated(Unauthenticated.MESSAGE)
    return Actor(user=token.user, token=token)


def statement_caller[T](
    actor: Actor | writes.Credentials,
    statement: Callable[[writes.Caller | writes.Credentials, writes.Count | None], T | None],
    *,
    counted: bool = False,
    receipt: bool = False,
) -> T:
    """Run an engine statement that authenticates its caller itself (`engine.checkpoints.as_who`):
    an agent token's `Credentials` as sent, its request counted against its rate by the same
    statement where the cache allows (RateLimited past it), or an actor as the caller whose rows it
    may touch. Its result; Unauthenticated when the token is not valid. `counted`: the request was
    counted already (`counted_with`); `receipt`: an operation's receipt, counted but never refused."""
    credentials = actor if isinstance(actor, writes.Credentials) else None
    counting = throttle.api_counting(credentials.token_hash) if credentials and not counted else None
    result = statement(who_calls(actor), counting)
    if result is None:
        raise Unauthenticated(Unauthenticated.MESSAGE)
    if credentials is not None and not counted:
        throttle.api_request_count(credentials.token_hash, receipt=receipt, counted=counting)
    return result


def locked_for[T](
    actor: Actor | writes.Credentials,
    lock: Callable[[writes.Caller], T | None],
    lock_as: Callable[[writes.Caller | writes.Credentials, writes.Count | None], "ledger.LockedFor[Any] | None"],
    *,
    receipt: bool = False,
) -> tuple[Actor, T | None]:
    """A lock taken for an actor (`lock`), or for an agent token that the lock's own statement
    authenticates (`lock_as`: one round trip for both; Unauthenticated when the token is not
    valid, and the request counted against its rate: RateLimited past it, unless it is a
    `receipt`). The actor the call's audit events name, and what the lock read (None: the caller
    may not see it)."""
    if not isinstance(actor, writes.Credentials):
        return actor, (lock(caller(actor)) if actor.user is not None else None)
    found = statement_caller(actor, lock_as, receipt=receipt)
    token_used(use_to_note(found.seen))
    return _token_actor(found), found.locked


def _token_actor(found: "ledger.LockedFor[Any]") -> Actor:
    """The agent a lock's statement authenticated, as an audit event names it: its user and token by
    id, the token with its name and prefix (Actor.label)."""
    seen = found.seen
    token = AgentToken(
        pk=seen.token_id,
        user_id=seen.caller.user_id,
        mission_id=seen.caller.token_mission_id,
        name=found.token_name or "",
        prefix=found.token_prefix or "",
        last_used_at=seen.token_last_used_at,
    )
    return Actor(user=get_user_model()(pk=seen.caller.user_id), token=token)


def run_locked_for(actor: Actor | writes.Credentials, run_id: int, key: writes.Key | None = None) -> tuple[Actor, writes.Locked]:
    """A run locked for a write (the engine's `lock_run`: the run, its mission locked, the key's
    earlier answer and the head's agent-state refs, in one statement that also takes the blob
    writers' guard), for an actor or for an agent token that the lock's own statement
    authenticates (`locked_for`: one round trip for both): the actor the call's audit events
    name, and what the lock read. NotFound when the caller may not see the run."""
    who, locked = locked_for(
        actor, lambda caller: writes.lock_run(caller, run_id, key), lambda who, count: engine_checkpoints.run_locked_as(who, run_id, key, count)
    )
    return who, run_locked_or_404(locked, run_id)


def run_beaten_for(actor: Actor | writes.Credentials, run_id: int) -> tuple[Run | None, bool]:
    """The run's heartbeat (`writes.heartbeat`: the run, or None when the caller may not see it;
    whether it beat), for an actor or for an agent token the same statement authenticates
    (Unauthenticated when it is not valid; the request counted against its rate)."""
    if not isinstance(actor, writes.Credentials):
        return writes.heartbeat(caller(actor), run_id) if actor.user is not None else (None, False)
    seen, run, beaten = statement_caller(actor, lambda who, count: engine_checkpoints.heartbeat_as(who, run_id, count))
    token_used(use_to_note(seen))
    return run, beaten


def who_calls(actor: Actor | writes.Credentials) -> writes.Caller | writes.Credentials:
    """Who an engine statement that authenticates its caller itself is run for: an agent token's
    credentials as sent, or the caller an actor stands for."""
    return actor if isinstance(actor, writes.Credentials) else caller(actor)


def use_to_note(seen: "engine_checkpoints.Seen") -> int | None:
    """The token whose use a write notes along the way: the caller's, when it is due (`use_due`)."""
    return seen.token_id if use_due(seen.token_last_used_at) else None


def counted_with[T](who: writes.Caller | writes.Credentials, write: Callable[[writes.Count | None, int], T | None]) -> tuple[T | None, bool]:
    """Run a write that authenticates its caller itself and claims nothing past the token's rate
    (the agent's one-statement checkpoint), with an agent token's request counted once: by the
    write's own statement where the database's cache keeps the count (`write(count, rate)`), else
    before it, so that past the rate RateLimited comes before anything is written. Its result
    (None: nothing written) and whether the request was counted (the caller then goes on without
    counting it again; a token that is not valid was not counted)."""
    if not isinstance(who, writes.Credentials):
        return write(None, 0), False
    counting = throttle.api_counting(who.token_hash)
    if counting is None:
        throttle.api_request_count(who.token_hash, receipt=False)
        return write(None, 0), True
    result = write(counting, settings.QUESTLOG_API_RATE)
    if counting.value is None:
        return result, False
    throttle.api_request_count(who.token_hash, receipt=False, counted=counting)
    return result, True


def use_recorded(token_id: int | None, last_used_at: datetime | None) -> None:
    """Record a token's use (if any) when it is due (`use_due`)."""
    if token_id is not None and use_due(last_used_at):
        token_used(token_id)


def token_authenticate(raw: str, *, count: writes.Count | None = None) -> AgentToken | None:
    return _authenticated(hash_token(raw), count)


def _authenticated(token_hash: str, count: writes.Count | None) -> AgentToken | None:
    # Every agent request but the checkpoint starts here: the engine's prepared read, not a
    # query the ORM compiles on each call.
    token = reads.agent_token(token_hash, count)
    if token is None or not token.user.is_active:
        return None
    if use_due(token.last_used_at):
        token.last_used_at = token_used(token.pk)
    return token


def use_due(last_used_at: datetime | None) -> bool:
    """Whether a token's use is to be recorded: at most once a minute, so that a busy agent does
    not turn every read into a write."""
    return last_used_at is None or timezone.now() - last_used_at > USE_RECORDED_EVERY


def token_used(token_id: int | None) -> datetime:
    """Record that the token (if any) was used now."""
    now = timezone.now()
    if token_id is not None:
        AgentToken.objects.filter(pk=token_id).update(last_used_at=now)
    return now


def token_revoke(*, user, token_id: int) -> AgentToken:
    token = AgentToken.objects.filter(user=user, pk=token_id).first()
    if token is None:
        raise NotFound("No such token.")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit(actor=Actor(user=user), mission=None, entity="agent_token", entity_id=token.pk, action="revoke")
    return token
