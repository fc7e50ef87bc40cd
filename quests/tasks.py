"""Celery tasks: each takes ids (or nothing), calls one service and returns what it reports.

Every task is idempotent and `acks_late`: a worker killed mid-task leaves its message to be
delivered again, and the services make a second run harmless. Work to do lives in the database,
so a message that is lost altogether is found again by the periodic sweeps (see
`quests.services.snapshots`). Queues: `snapshots` for the snapshot itself, `maintenance` for the
sweeps and pruning, so a long pruning pass never holds snapshots up."""

from typing import Any

from celery import shared_task

from quests.services import approvals, runs, snapshots


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def snapshot_take_task(request_id: int) -> str:
    return snapshots.snapshot_take(request_id=request_id)


@shared_task(acks_late=True, ignore_result=True)
def snapshots_sweep_task() -> int:
    return snapshots.snapshots_sweep()


@shared_task(acks_late=True, ignore_result=True)
def stalled_runs_sweep_task() -> int:
    return runs.sweep_stalled_runs()


@shared_task(acks_late=True, ignore_result=True)
def approvals_expire_task() -> int:
    return approvals.approvals_expire_due()


@shared_task(acks_late=True, ignore_result=True)
def snapshots_prune_task() -> dict[str, Any]:
    return snapshots.snapshots_prune()
