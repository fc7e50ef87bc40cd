from dataclasses import dataclass
from typing import Any

from quests.models import AgentToken, AuditEvent, Mission


@dataclass(frozen=True)
class Actor:
    """Who is acting: a person (session) or an agent (bearer token), or the system itself."""

    user: Any = None
    token: AgentToken | None = None
    system: str = ""

    @property
    def is_person(self) -> bool:
        return self.user is not None and self.token is None and not self.system

    @property
    def label(self) -> str:
        if self.system:
            return f"system:{self.system}"
        if self.token is not None:
            return f"agent:{self.token.name or self.token.prefix}"
        return f"user:{self.user.get_username()}" if self.user is not None else "anonymous"


SYSTEM = Actor(system="questlog")


def audit(
    *,
    actor: Actor,
    mission: Mission | None,
    entity: str,
    entity_id: int | None,
    action: str,
    from_state: str = "",
    to_state: str = "",
    **data: Any,
) -> AuditEvent:
    """Write an audit event."""
    event = audit_event(
        actor=actor,
        mission=mission,
        entity=entity,
        entity_id=entity_id,
        action=action,
        from_state=from_state,
        to_state=to_state,
        **data,
    )
    event.save()
    return event


def audit_event(
    *,
    actor: Actor,
    mission: Mission | None,
    entity: str,
    entity_id: Any,
    action: str,
    from_state: str = "",
    to_state: str = "",
    **data: Any,
) -> AuditEvent:
    """An audit event not saved yet, for a caller inserting many in one statement."""
    return AuditEvent(
        mission=mission,
        actor_user=actor.user if actor.user is not None and getattr(actor.user, "pk", None) else None,
        actor_token=actor.token,
        actor=actor.label,
        entity=entity,
        entity_id=entity_id,
        action=action,
        from_state=from_state or "",
        to_state=to_state or "",
        data=data,
    )
