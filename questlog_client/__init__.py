"""A typed Python client for agents that keep their save state in Questlog.

    from questlog_client import Questlog

    ql = Questlog("http://127.0.0.1:8000", token)
    mission = ql.missions.create("Plan the offsite", "Book a venue for 12 people.")
    with mission.start_run(agent="planner") as run:
        run.record("decision", "Lakeside Lodge: under budget", key="venue")
        receipt = run.operation("hold", kind="reservation.hold", target="lakeside", request=hold,
                                reconcile=venues.lookup)(lambda op: venues.hold(hold, ref=op.id))
        run.request_approval("send the invitations", payload=invite, reason="emails cannot be unsent")

`questlog_client.testing` crashes an agent after every step and checks that it resumes without
repeating a side effect or forgetting a constraint, a decision or an approval (`replaycheck`).
"""

from questlog_client.client import Questlog
from questlog_client.core import new_key
from questlog_client.errors import (
    ApiError,
    Conflict,
    EffectFailed,
    Forbidden,
    InvalidInput,
    InvalidTransition,
    KeyReuse,
    MalformedJSON,
    MissionNotStartable,
    NotFound,
    OperationFailed,
    PayloadTooLarge,
    QuestlogError,
    ReconcileNeeded,
    RetryBudgetExhausted,
    RunActive,
    RunEnded,
    RunStateMismatch,
    ServerError,
    StillWaiting,
    TransportError,
    Unauthenticated,
)
from questlog_client.missions import Mission, Missions
from questlog_client.models import (
    Approval,
    ApprovalRequested,
    ApprovalsRequested,
    Bundle,
    Checkpoint,
    Constraint,
    MemoryItem,
    MemoryProposal,
    Milestone,
    MilestoneClaimed,
    Operation,
    Outcome,
    Receipt,
    Record,
)
from questlog_client.operations import OperationCall
from questlog_client.replay.steps import Step
from questlog_client.runs import Run

__all__ = [
    "Questlog",
    "Missions",
    "Mission",
    "Run",
    "OperationCall",
    "Step",
    "new_key",
    "QuestlogError",
    "ApiError",
    "TransportError",
    "Conflict",
    "RunActive",
    "RunEnded",
    "MissionNotStartable",
    "KeyReuse",
    "InvalidTransition",
    "RetryBudgetExhausted",
    "NotFound",
    "Unauthenticated",
    "Forbidden",
    "InvalidInput",
    "MalformedJSON",
    "PayloadTooLarge",
    "ServerError",
    "OperationFailed",
    "ReconcileNeeded",
    "EffectFailed",
    "StillWaiting",
    "RunStateMismatch",
    "Bundle",
    "Approval",
    "ApprovalRequested",
    "ApprovalsRequested",
    "Checkpoint",
    "Constraint",
    "MemoryItem",
    "MemoryProposal",
    "Milestone",
    "MilestoneClaimed",
    "Operation",
    "Outcome",
    "Receipt",
    "Record",
]
