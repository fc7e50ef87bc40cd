"""The staff retention policy. Each change writes a new row: the newest row is the policy in
force, older rows stay as its history (a purge log points at the version it ran under)."""

from django.db import transaction
from django.db.models import QuerySet

from checkpoints.models import RetentionPolicy
from quests.services.audit import Actor, audit
from quests.services.errors import InvalidInput, NotFound

POLICY_FIELDS = ("grace_days", "approved_max_days", "memory_max_days", "snapshot_prune_days", "snapshot_keep_newest", "purge_batch_size")


def require_staff(actor: Actor) -> None:
    """Staff pages and actions do not exist for anyone else (404, like another user's object)."""
    user = actor.user
    if actor.token is not None or actor.system or user is None or not user.is_active or not user.is_staff:
        raise NotFound("No such page.")


def retention_policy_update(*, actor: Actor, **values: int) -> RetentionPolicy:
    """Staff put a new policy in force: a new row with the given values (the others carried over
    from the current one). Expiries already set are kept; the new grace period applies to quests
    that end (or change their keep choice) from now on."""
    require_staff(actor)
    _check_values(values)
    with transaction.atomic():
        # Two staff saving at once: the lock on the version in force orders them, and the
        # newest row is read again after it, so the second one starts from the version the
        # first just wrote and no change is silently dropped.
        RetentionPolicy.objects.select_for_update().get(pk=RetentionPolicy.current().pk)
        latest = RetentionPolicy.objects.order_by("-id").first()
        assert latest is not None  # current() above made the first one if there was none
        before = {name: getattr(latest, name) for name in POLICY_FIELDS}
        policy = RetentionPolicy.objects.create(**{**before, **values}, updated_by=actor.user)
        changed = {name: [before[name], getattr(policy, name)] for name in POLICY_FIELDS if before[name] != getattr(policy, name)}
        audit(
            actor=actor,
            mission=None,
            entity="retention_policy",
            entity_id=policy.pk,
            action="update",
            changes=changed,
            replaces=latest.pk,
        )
        return policy


def _check_values(values: dict[str, int]) -> None:
    unknown = set(values) - set(POLICY_FIELDS)
    if unknown:
        raise InvalidInput(f"Unknown policy field {sorted(unknown)[0]}.", field=sorted(unknown)[0])
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidInput(f"{name} must be a whole number of zero or more.", field=name)
    if values.get("purge_batch_size") == 0:
        raise InvalidInput("purge_batch_size must be at least 1.", field="purge_batch_size")


def policy_history(*, limit: int = 10) -> QuerySet[RetentionPolicy]:
    """The versions before the one in force, newest first."""
    return RetentionPolicy.objects.select_related("updated_by").order_by("-id")[1 : limit + 1]
