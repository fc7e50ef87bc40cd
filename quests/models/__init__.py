"""The quests app's models, one module per concern: `mission` (missions, runs, constraints),
`waiting` (what waits for a person: approvals, milestones, standing decisions), `people` (memory,
agent tokens, settings), `audit` (the audit trail, idempotent requests) and `holds`; LangGraph's
rows live in `quests.langgraph.models` (imported here, so Django registers them with the app).
These names are the package's interface: callers import from `quests.models`."""

from quests.langgraph.models import GraphThread
from quests.models.audit import AuditEvent, IdempotentRequest
from quests.models.holds import Hold
from quests.models.mission import TERMINAL_STATUSES, Constraint, ConstraintSource, Mission, MissionQuerySet, MissionStatus, Run, StopReason
from quests.models.people import AgentToken, MemoryItem, MemoryProposal, PersonSettings
from quests.models.waiting import AWAITING_REVIEW, Approval, ApprovalStatus, Milestone, MilestoneKind, MilestoneQuerySet, ReviewStatus, StandingDecision

__all__ = [
    "AWAITING_REVIEW",
    "TERMINAL_STATUSES",
    "AgentToken",
    "Approval",
    "ApprovalStatus",
    "AuditEvent",
    "Constraint",
    "ConstraintSource",
    "GraphThread",
    "Hold",
    "IdempotentRequest",
    "MemoryItem",
    "MemoryProposal",
    "Milestone",
    "MilestoneKind",
    "MilestoneQuerySet",
    "Mission",
    "MissionQuerySet",
    "MissionStatus",
    "PersonSettings",
    "ReviewStatus",
    "Run",
    "StandingDecision",
    "StopReason",
]
