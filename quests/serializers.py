"""Shim until the export moves to schemas: each function delegates to `quests.schemas`, the one
shape of every object. New code uses `quests.schemas` directly."""

from typing import Any

from quests import schemas


def iso(value) -> str | None:
    return value.isoformat() if value else None


def mission_dict(mission) -> dict[str, Any]:
    return schemas.dump(schemas.MissionOut, mission)


def run_dict(run) -> dict[str, Any]:
    return schemas.dump(schemas.RunOut, run)


def checkpoint_dict(cp) -> dict[str, Any]:
    return schemas.dump(schemas.CheckpointOut, cp)


def constraint_dict(c) -> dict[str, Any]:
    return schemas.dump(schemas.ConstraintOut, c)


def record_dict(r) -> dict[str, Any]:
    return schemas.dump(schemas.RecordOut, r)


def operation_dict(op) -> dict[str, Any]:
    return schemas.dump(schemas.OperationOut, op)


def approval_dict(a) -> dict[str, Any]:
    return schemas.dump(schemas.ApprovalOut, a)


def milestone_dict(m) -> dict[str, Any]:
    return schemas.dump(schemas.MilestoneOut, m)


def memory_item_dict(item) -> dict[str, Any]:
    return schemas.dump(schemas.MemoryItemOut, item)


def memory_proposal_dict(p) -> dict[str, Any]:
    return schemas.dump(schemas.MemoryProposalOut, p)
