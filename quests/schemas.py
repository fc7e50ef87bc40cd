"""The one shape of every object the API returns (API.md), as django-ninja output schemas. The
API, the resume bundle, the saved state document and the data export all build their answers
from these, so a field is named, typed and formatted in exactly one place."""

from datetime import datetime
from operator import attrgetter
from typing import Annotated, Any

from ninja import Schema
from pydantic import ConfigDict, PlainSerializer, WithJsonSchema

# `isoformat()` as the API has always written it (microseconds, "+00:00"), in python mode too:
# the state document is hashed, and a different spelling of the same instant would change hashes.
IsoDatetime = Annotated[
    datetime,
    PlainSerializer(lambda value: value.isoformat(), return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
JsonObject = dict[str, Any]


def dump(schema: type[Schema], obj: Any, *, exclude: set[str] | None = None) -> dict[str, Any]:
    """A plain dict of `obj` in the shape of `schema`, for answers that are not returned by an
    endpoint directly (the state document, the export)."""
    return schema.from_orm(obj).model_dump(exclude=exclude)


class ProgressOut(Schema):
    approved: int
    planned: int


class MissionSummaryOut(Schema):
    """The mission as the resume bundle shows it."""

    id: int
    title: str
    objective: str
    status: str
    stop_reason: str | None
    stop_detail: str
    retry_at: IsoDatetime | None


class MissionOut(MissionSummaryOut):
    created_at: IsoDatetime | None
    ended_at: IsoDatetime | None
    progress: ProgressOut
    planned_milestones: list[JsonObject]
    head_checkpoint_id: int | None
    last_verified_checkpoint_id: int | None
    retention_approved_at: IsoDatetime | None
    expires_at: IsoDatetime | None
    purged_at: IsoDatetime | None

    @staticmethod
    def resolve_planned_milestones(mission) -> list[JsonObject]:
        return mission.planned_milestones or []


class RunOut(Schema):
    id: int
    mission_id: int
    number: int
    agent: str
    started_at: IsoDatetime
    heartbeat_at: IsoDatetime
    ended_at: IsoDatetime | None
    stop_reason: str | None
    stop_detail: str
    active: bool

    @staticmethod
    def resolve_active(run) -> bool:
        return run.ended_at is None


class CheckpointOut(Schema):
    """A checkpoint in a list: without its documents, which can be large."""

    id: int
    mission_id: int
    run_id: int | None
    parent_id: int | None
    seq: int
    trigger: str
    hash: str
    verified: bool
    size_bytes: int
    new_bytes: int
    note: str
    created_at: IsoDatetime | None
    compaction_report: JsonObject


class CheckpointDetailOut(CheckpointOut):
    agent_state: JsonObject | None
    state: JsonObject | None


class ConstraintSummaryOut(Schema):
    """An active constraint as the resume bundle shows it."""

    id: int
    text: str
    source: str
    created_at: IsoDatetime | None


class ConstraintOut(ConstraintSummaryOut):
    retired_at: IsoDatetime | None
    replaces_id: int | None


class RecordOut(Schema):
    id: int
    kind: str
    text: str
    data: Any
    resolved: bool
    resolved_by_id: int | None
    abandoned: bool
    archived: bool
    blob_sha256: str | None
    size_bytes: int
    created_at: IsoDatetime | None

    @staticmethod
    def resolve_archived(record) -> bool:
        return record.blob_id is not None

    @staticmethod
    def resolve_blob_sha256(record) -> str | None:
        return record.blob_id


class OperationOut(Schema):
    id: int
    key: str
    kind: str
    target: str
    request: Any
    status: str
    attempts: int
    max_attempts: int
    external_id: str | None
    external_status: str | None
    receipt: Any
    error: str | None
    retryable: bool | None
    created_at: IsoDatetime | None
    updated_at: IsoDatetime | None

    # The model stores "" for "not yet"; the API has always said null.
    @staticmethod
    def resolve_external_id(op) -> str | None:
        return op.external_id or None

    @staticmethod
    def resolve_external_status(op) -> str | None:
        return op.external_status or None

    @staticmethod
    def resolve_error(op) -> str | None:
        return op.error or None


class ApprovalSummaryOut(Schema):
    """An approval as the resume bundle shows it."""

    id: int
    action: str
    payload: Any
    reason: str
    status: str
    decided_payload: Any
    note: str
    # The agent's own id for what it asked (a tool call id): an adapter matches decisions to its
    # paused calls by it, so it is in the bundle the adapter resumes from.
    agent_ref: str = ""
    # Decided for every request of this action in the mission (a standing decision): an adapter
    # passes it on as its framework's "always" (the OpenAI Agents SDK's always_approve/_reject).
    always: bool = False
    # A graph's question: the node that asked and which of its questions it is (1, 2, …).
    node: str = ""
    question: int | None = None


class StandingDecisionOut(Schema):
    """A person's decision for every request of `action` in the mission, until revoked."""

    id: int
    action: str
    decision: str
    note: str
    created_at: IsoDatetime | None
    revoked_at: IsoDatetime | None


class ApprovalOut(ApprovalSummaryOut):
    mission_id: int
    checkpoint_id: int | None
    expires_at: IsoDatetime | None
    created_at: IsoDatetime | None
    decided_at: IsoDatetime | None

    # The API's `expires_at` is when a person must answer; the model's own `expires_at` is
    # the retention expiry.
    @staticmethod
    def resolve_expires_at(approval) -> datetime | None:
        return approval.respond_by


class ApprovalList(Schema):
    items: list[ApprovalOut]


class MilestoneSummaryOut(Schema):
    """A milestone as the resume bundle shows it."""

    id: int
    kind: str
    title: str
    review_status: str
    note: str
    gate: bool


class MilestoneOut(MilestoneSummaryOut):
    mission_id: int
    summary: str
    evidence: list[Any]
    checkpoint_id: int | None
    created_at: IsoDatetime | None
    reviewed_at: IsoDatetime | None


class MemoryEntryOut(Schema):
    """A memory item as the resume bundle shows it."""

    name: str
    value: str


class MemoryItemOut(MemoryEntryOut):
    id: int
    source_mission_id: int | None
    approved_at: IsoDatetime | None
    expires_at: IsoDatetime | None


class MemoryProposalOut(Schema):
    id: int
    mission_id: int | None
    name: str
    value: str
    reason: str
    status: str
    created_at: IsoDatetime | None
    decided_at: IsoDatetime | None


class BundleCheckpointOut(Schema):
    id: int
    seq: int
    hash: str
    verified: bool
    trigger: str
    created_at: IsoDatetime | None
    agent_state: JsonObject | None


class CheckpointRefOut(Schema):
    id: int
    seq: int
    hash: str


class OperationGroupsOut(Schema):
    completed: list[OperationOut]
    to_reconcile: list[OperationOut]
    planned: list[OperationOut]
    failed: list[OperationOut]


class ResumeBundleOut(Schema):
    mission: MissionSummaryOut
    next_action: str
    message: str
    checkpoint: BundleCheckpointOut | None
    last_verified_checkpoint: CheckpointRefOut | None
    constraints: list[ConstraintSummaryOut]
    decisions: list[RecordOut]
    open_questions: list[RecordOut]
    blockers: list[RecordOut]
    dependencies: list[RecordOut]
    milestones: list[MilestoneSummaryOut]
    approvals: list[ApprovalSummaryOut]
    operations: OperationGroupsOut
    memory: list[MemoryEntryOut]
    # The person's standing decisions for this mission, revoked ones too (an adapter undoes an
    # "always" its framework kept once the person revoked it).
    standing_decisions: list[StandingDecisionOut] = []


class RunStartOut(Schema):
    run: RunOut
    resume: ResumeBundleOut


class RestoreOut(MissionOut):
    checkpoint: CheckpointOut


class ForgetOut(Schema):
    deleted: bool
    id: int


class MissionList(Schema):
    items: list[MissionOut]


class CheckpointList(Schema):
    items: list[CheckpointOut]


class MemoryItemList(Schema):
    items: list[MemoryItemOut]


class ErrorDetailOut(Schema):
    field: str
    message: str


class ErrorBodyOut(Schema):
    """`field` names the offending input when there is one; a conflict adds what it is about
    (the current `status`, a run's `stop_reason`, a body `limit`, validation `details`, the
    seconds to wait in `retry_after` on 429 and 503)."""

    model_config = ConfigDict(extra="allow")

    code: str
    message: str
    field: str | None = None
    details: list[ErrorDetailOut] | None = None
    retry_after: int | None = None


class ErrorOut(Schema):
    error: ErrorBodyOut


def construct(schema: type[Schema], obj: Any) -> Any:
    """`schema.from_orm(obj)` without validation, for rows just read from the database (their
    types are the schema's already): each field is the attribute of the same name, or what the
    schema's own `resolve_<field>` makes of the object. The resume bundle is built this way,
    because validating every row of a large ledger cost more than reading it."""
    return schema.model_construct(**{name: get(obj) for name, get in _getters(schema)})


def construct_all(schema: type[Schema], objs: Any) -> list[Any]:
    getters = _getters(schema)
    return [schema.model_construct(**{name: get(obj) for name, get in getters}) for obj in objs]


_GETTERS: dict[type, list] = {}


def _getters(schema: type[Schema]) -> list:
    getters = _GETTERS.get(schema)
    if getters is None:
        getters = [(name, getattr(schema, f"resolve_{name}", None) or attrgetter(name)) for name in schema.model_fields]
        _GETTERS[schema] = getters
    return getters
