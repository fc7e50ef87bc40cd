"""Read side of a mission's operation ledger on the pages, at any size. The mission page shows
what needs a person or the agent (operations to reconcile, failed or planned) in full, since those
are few and actionable, and only the newest of the rest with a count; the ledger page pages
through the whole ledger. Each is a fixed number of queries
returning a bounded number of rows, whatever the number of operations or milestones."""

from dataclasses import dataclass
from functools import cache
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Q, QuerySet

from checkpoints.models import Operation, OperationStatus
from quests.models import Mission
from quests.selectors.common import newest_per_group
from quests.services.bundle import OPERATION_GROUPS

LEDGER_SHOWN = 10
LEDGER_PAGE_SIZE = 50
# The columns the ledger's table shows (the request and its hashes are the agent's, not a person's).
LEDGER_FIELDS = (
    "id",
    "mission_id",
    "key",
    "kind",
    "target",
    "status",
    "attempts",
    "max_attempts",
    "external_id",
    "external_status",
    "receipt",
    "error",
)
# `?status=` of the ledger page: the bundle's names for the groups of the ledger.
STATUS_OF_GROUP = {group: status for status, group in OPERATION_GROUPS.items()}


@dataclass
class LedgerWindow:
    """The operations the mission page lists, newest first, and how many completed ones there are."""

    operations: list[Operation]
    completed_total: int

    @property
    def completed_shown(self) -> int:
        return sum(op.status == OperationStatus.COMPLETED for op in self.operations)

    @property
    def completed_hidden(self) -> int:
        return self.completed_total - self.completed_shown


def ledger_window(mission: Mission) -> LedgerWindow:
    """Every operation that is not completed (to reconcile, failed, planned: a person or the agent
    has something to do about each) and the newest LEDGER_SHOWN completed ones, with the number of
    completed ones: one query, like the mission page's decided approvals."""
    rows: list[Any] = list(operations_shown().filter(mission_id=mission.pk))  # with newest_per_group's attributes
    total = next((op.in_group for op in rows if op.status == OperationStatus.COMPLETED), 0)
    return LedgerWindow(operations=rows, completed_total=total)


@cache
def operations_shown() -> QuerySet[Operation]:
    """The operations `ledger_window` reads, of every mission: built once per process, a mission's
    being this filtered on it (the same SQL as filtering first: see reviews.approvals_shown)."""
    completed = Q(status=OperationStatus.COMPLETED)
    return Operation.objects.only(*LEDGER_FIELDS).annotate(**newest_per_group(completed)).filter(~completed | Q(newest__lte=LEDGER_SHOWN)).order_by("-id")


def ledger_status(raw: str | None) -> str | None:
    """The ledger page's status group from its URL query; anything else is no filter."""
    return raw if raw in STATUS_OF_GROUP else None


def ledger_page(mission: Mission, group: str | None, number: Any) -> Page:
    """One page of the mission's whole ledger, newest first, of one status group or all: a count
    and a page of rows. A page number that is not one is the first page; past the end, the last."""
    operations = Operation.objects.filter(mission_id=mission.pk).only(*LEDGER_FIELDS).order_by("-id")
    if group is not None:
        operations = operations.filter(status=STATUS_OF_GROUP[group])
    return Paginator(operations, LEDGER_PAGE_SIZE).get_page(number)
