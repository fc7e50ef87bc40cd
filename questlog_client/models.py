"""Typed objects of the agent API (API.md). Each keeps the answer it came from in `raw`, so fields
the server adds later are never lost to the caller."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T")


def parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _build(cls: type[T], data: dict[str, Any] | None, **nested: Any) -> T:
    """Fill a dataclass from an answer: known fields only, `*_at` as datetimes, `raw` kept."""
    data = data or {}
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name == "raw" or f.name not in data:
            continue
        value = data[f.name]
        kwargs[f.name] = parse_time(value) if f.name.endswith("_at") and isinstance(value, str) else value
    kwargs.update(nested)
    return cls(**kwargs, raw=data)  # type: ignore[call-arg]


@dataclass
class Progress:
    approved: int = 0
    planned: int = 0


@dataclass
class Mission:
    id: int
    title: str = ""
    objective: str = ""
    status: str = ""
    stop_reason: str | None = None
    stop_detail: str = ""
    retry_at: datetime | None = None
    created_at: datetime | None = None
    ended_at: datetime | None = None
    progress: Progress = field(default_factory=Progress)
    head_checkpoint_id: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Mission:
        return _build(cls, data, progress=Progress(**{k: v for k, v in (data.get("progress") or {}).items() if k in ("approved", "planned")}))


@dataclass
class Run:
    id: int
    mission_id: int = 0
    number: int = 0
    agent: str = ""
    started_at: datetime | None = None
    heartbeat_at: datetime | None = None
    ended_at: datetime | None = None
    stop_reason: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Run:
        return _build(cls, data)


@dataclass
class Checkpoint:
    id: int
    mission_id: int | None = None
    run_id: int | None = None
    parent_id: int | None = None
    seq: int = 0
    trigger: str = ""
    hash: str = ""
    verified: bool = False
    size_bytes: int = 0
    created_at: datetime | None = None
    agent_state: dict[str, Any] | None = None
    state: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Checkpoint:
        return _build(cls, data)


@dataclass
class Constraint:
    id: int
    text: str = ""
    source: str = ""
    created_at: datetime | None = None
    retired_at: datetime | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Constraint:
        return _build(cls, data)


@dataclass
class Record:
    id: int
    kind: str = ""
    text: str = ""
    data: dict[str, Any] | None = None
    resolved: bool = False
    created_at: datetime | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        return _build(cls, data)


@dataclass
class Operation:
    id: int
    key: str = ""
    kind: str = ""
    target: str = ""
    status: str = ""
    attempts: int = 0
    max_attempts: int = 3
    request: dict[str, Any] | None = None
    external_id: str | None = None
    external_status: str | None = None
    receipt: dict[str, Any] | None = None
    error: str | None = None
    retryable: bool | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Operation:
        return _build(cls, data)


@dataclass
class Approval:
    id: int
    action: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    status: str = ""
    decided_payload: dict[str, Any] | None = None
    note: str = ""
    checkpoint_id: int | None = None
    expires_at: datetime | None = None
    agent_ref: str = ""
    # Decided for every request of this action in the mission: a person's standing decision.
    always: bool = False
    node: str = ""
    question: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Approval:
        return _build(cls, data)

    @property
    def granted(self) -> bool:
        """Approved as asked, or approved with a person's edits (`decided_payload` holds them)."""
        return self.status in ("approved", "edited")


@dataclass
class StandingDecision:
    """A person's decision ("approve" or "reject") for every request of `action` in a mission."""

    id: int
    action: str = ""
    decision: str = ""
    note: str = ""
    created_at: datetime | None = None
    revoked_at: datetime | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StandingDecision:
        return _build(cls, data)

    @property
    def active(self) -> bool:
        return self.revoked_at is None


@dataclass
class Milestone:
    id: int
    kind: str = ""
    title: str = ""
    summary: str = ""
    review_status: str = ""
    note: str = ""
    gate: bool = False
    checkpoint_id: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Milestone:
        return _build(cls, data)


@dataclass
class MemoryProposal:
    id: int
    name: str = ""
    value: str = ""
    reason: str = ""
    status: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryProposal:
        return _build(cls, data)


@dataclass
class MemoryItem:
    name: str
    value: str = ""
    id: int | None = None
    source_mission_id: int | None = None
    approved_at: datetime | None = None
    expires_at: datetime | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryItem:
        return _build(cls, data)


@dataclass
class BundleMission:
    id: int
    title: str = ""
    objective: str = ""
    status: str = ""
    stop_reason: str | None = None
    stop_detail: str = ""
    retry_at: datetime | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class BundleCheckpoint:
    id: int
    seq: int = 0
    hash: str = ""
    verified: bool = False
    trigger: str = ""
    created_at: datetime | None = None
    agent_state: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class CheckpointRef:
    id: int
    seq: int = 0
    hash: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class BundleOperations:
    completed: list[Operation] = field(default_factory=list)
    to_reconcile: list[Operation] = field(default_factory=list)
    planned: list[Operation] = field(default_factory=list)
    failed: list[Operation] = field(default_factory=list)

    def all(self) -> list[Operation]:
        return sorted([*self.completed, *self.to_reconcile, *self.planned, *self.failed], key=lambda op: op.id)


@dataclass
class Bundle:
    """The resume bundle: everything the next run may safely assume (API.md, "Resume bundle")."""

    mission: BundleMission
    next_action: str
    message: str = ""
    checkpoint: BundleCheckpoint | None = None
    last_verified_checkpoint: CheckpointRef | None = None
    constraints: list[Constraint] = field(default_factory=list)
    decisions: list[Record] = field(default_factory=list)
    open_questions: list[Record] = field(default_factory=list)
    blockers: list[Record] = field(default_factory=list)
    dependencies: list[Record] = field(default_factory=list)
    milestones: list[Milestone] = field(default_factory=list)
    approvals: list[Approval] = field(default_factory=list)
    operations: BundleOperations = field(default_factory=BundleOperations)
    memory: list[MemoryItem] = field(default_factory=list)
    standing_decisions: list[StandingDecision] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Bundle:
        ops = data.get("operations") or {}
        cp = data.get("checkpoint")
        verified = data.get("last_verified_checkpoint")
        return cls(
            mission=_build(BundleMission, data.get("mission")),
            next_action=data.get("next_action", ""),
            message=data.get("message", ""),
            checkpoint=None if cp is None else _build(BundleCheckpoint, cp, agent_state=cp.get("agent_state") or {}),
            last_verified_checkpoint=None if verified is None else _build(CheckpointRef, verified),
            constraints=[Constraint.from_dict(c) for c in data.get("constraints", [])],
            decisions=[Record.from_dict(r) for r in data.get("decisions", [])],
            open_questions=[Record.from_dict(r) for r in data.get("open_questions", [])],
            blockers=[Record.from_dict(r) for r in data.get("blockers", [])],
            dependencies=[Record.from_dict(r) for r in data.get("dependencies", [])],
            milestones=[Milestone.from_dict(m) for m in data.get("milestones", [])],
            approvals=[Approval.from_dict(a) for a in data.get("approvals", [])],
            operations=BundleOperations(
                **{group: [Operation.from_dict(op) for op in ops.get(group, [])] for group in ("completed", "to_reconcile", "planned", "failed")}
            ),
            memory=[MemoryItem.from_dict(m) for m in data.get("memory", [])],
            standing_decisions=[StandingDecision.from_dict(d) for d in data.get("standing_decisions", [])],
            raw=data,
        )

    @property
    def agent_state(self) -> dict[str, Any]:
        """The agent's own state at the mission's head checkpoint (empty before the first one)."""
        return dict(self.checkpoint.agent_state) if self.checkpoint else {}

    def operation(self, key: str) -> Operation | None:
        return next((op for op in self.operations.all() if op.key == key), None)

    def approval(self, action: str) -> Approval | None:
        """The newest approval asked for `action`."""
        return next((a for a in reversed(self.approvals) if a.action == action), None)

    def milestone(self, kind: str) -> Milestone | None:
        return next((m for m in reversed(self.milestones) if m.kind == kind), None)


@dataclass
class Outcome:
    """What a side effect did in the outside world: the external object's id, its status, and
    whatever else the receipt should keep."""

    external_id: str
    external_status: str
    receipt: dict[str, Any] | None = None


@dataclass
class Receipt:
    """The result of `run.operation(...)`: the stored outcome of the side effect. `replayed` is
    true when an earlier run had already done it (nothing was done again); `reconciled` when the
    outcome was found by asking the external service after an unconfirmed attempt."""

    operation: Operation
    external_id: str | None
    external_status: str | None
    receipt: dict[str, Any] | None
    replayed: bool = False
    reconciled: bool = False


@dataclass
class ApprovalRequested:
    """`run.request_approval(...)` ends the run: the mission waits for a person."""

    approval: Approval
    run_ended: bool = True
    stop_reason: str = "waiting_for_approval"


@dataclass
class ApprovalsRequested:
    """`run.request_approvals(...)` asks several questions at once and ends the run once."""

    approvals: list[Approval]
    run_ended: bool = True
    stop_reason: str = "waiting_for_approval"


@dataclass
class MilestoneClaimed:
    """A claimed milestone; a gate ends the run (`run_ended`) until a person reviews it."""

    milestone: Milestone
    run_ended: bool = False
    stop_reason: str | None = None
