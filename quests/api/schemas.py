"""Request bodies of the agent API (API.md). Responses are the plain dicts of quests.serializers."""

from datetime import datetime
from typing import Any, Literal

from ninja import Schema
from pydantic import Field, StringConstraints
from typing_extensions import Annotated

Key = Annotated[str, StringConstraints(min_length=1, max_length=200)] | None
Text = Annotated[str, StringConstraints(min_length=1, strip_whitespace=True)]
Title = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]


class PlannedMilestoneIn(Schema):
    kind: str
    title: Annotated[str, StringConstraints(min_length=1, max_length=300)]


class MissionIn(Schema):
    title: Title
    objective: Text
    constraints: list[Text] | None = None
    planned_milestones: list[PlannedMilestoneIn] | None = None
    key: Key = None


class ConstraintIn(Schema):
    text: Text
    key: Key = None


class RunIn(Schema):
    agent: Annotated[str, StringConstraints(max_length=200)] | None = None
    key: Key = None


class CheckpointIn(Schema):
    agent_state: dict[str, Any]
    note: str | None = None
    key: Key = None


class RecordIn(Schema):
    kind: Literal["decision", "open_question", "blocker", "dependency", "evidence", "note", "tool_output"]
    text: Annotated[str, StringConstraints(min_length=1)]
    data: dict[str, Any] | None = None
    resolves: int | None = None
    key: Key = None


class OperationIn(Schema):
    key: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    kind: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    target: Annotated[str, StringConstraints(min_length=1, max_length=500)]
    request: dict[str, Any]
    max_attempts: int = Field(3, ge=1, le=1000)


class CompleteIn(Schema):
    external_id: Annotated[str, StringConstraints(max_length=500)]
    external_status: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    receipt: dict[str, Any] | None = None


class FailIn(Schema):
    error: Annotated[str, StringConstraints(min_length=1)]
    retryable: bool


class ObserveIn(Schema):
    external_status: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    receipt: dict[str, Any] | None = None


class ApprovalIn(Schema):
    action: Annotated[str, StringConstraints(min_length=1, max_length=500, strip_whitespace=True)]
    payload: dict[str, Any]
    reason: Text
    agent_state: dict[str, Any] | None = None
    expires_at: datetime | None = None
    key: Key = None


class MilestoneIn(Schema):
    kind: Literal["research_complete", "plan_approved", "data_verified", "draft_ready", "deployment_paused", "milestone_reviewed", "custom"]
    title: Annotated[str, StringConstraints(min_length=1, max_length=300, strip_whitespace=True)]
    summary: str = ""
    evidence: list[int] | None = None
    gate: bool = False
    agent_state: dict[str, Any] | None = None
    key: Key = None


class MemoryProposalIn(Schema):
    name: Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]
    value: Text
    reason: Text
    key: Key = None


class StopIn(Schema):
    reason: Literal["completed", "blocked_external", "failed_retry_budget"]
    detail: str = ""
    retry_at: datetime | None = None


class DecisionIn(Schema):
    decision: Literal["approve", "reject", "edit"]
    payload: dict[str, Any] | None = None
    note: str = ""


class ReviewIn(Schema):
    action: Literal["approve", "correct", "pause"]
    note: str = ""


class RestoreIn(Schema):
    checkpoint_id: int


class MemoryDecisionIn(Schema):
    decision: Literal["approve", "decline"]
