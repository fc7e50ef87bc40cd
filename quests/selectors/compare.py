"""Key-by-key difference between two checkpoint states, for people to read (the checkpoint page).
Lists of items with an `id` (constraints, records, operations…) are matched by id, so an item that
moved or changed one field shows as that one change, not as a removed and an added list; and the
checkpoints a checkpoint page offers to compare with."""

from dataclasses import dataclass
from typing import Any

from django.db.models import Q, Subquery

from checkpoints.models import Checkpoint
from quests.models import Mission
from quests.selectors.history import CHECKPOINT_LIST_FIELDS

ADDED = "added"
REMOVED = "removed"
CHANGED = "changed"


@dataclass(frozen=True)
class Change:
    path: tuple[str, ...]
    kind: str
    old: Any = None
    new: Any = None

    @property
    def section(self) -> str:
        return self.path[0]

    @property
    def key(self) -> str:
        return " › ".join(self.path[1:]) or self.path[0]


def _is_keyed(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(i, dict) and "id" in i for i in value)


def _keyed(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"#{item['id']}": item for item in items}


def diff(old: Any, new: Any, path: tuple[str, ...] = ()) -> list[Change]:
    """Changes that turn `old` into `new`, deepest key first named in `path`."""
    if old == new:
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        return _diff_maps(old, new, path)
    if (_is_keyed(old) or old == []) and (_is_keyed(new) or new == []):
        return _diff_maps(_keyed(old), _keyed(new), path)
    return [Change(path, CHANGED, old, new)]


def _diff_maps(old: dict[str, Any], new: dict[str, Any], path: tuple[str, ...]) -> list[Change]:
    changes: list[Change] = []
    for key in sorted(set(old) | set(new), key=str):
        here = (*path, str(key))
        if key not in new:
            changes.append(Change(here, REMOVED, old=old[key]))
        elif key not in old:
            changes.append(Change(here, ADDED, new=new[key]))
        else:
            changes.extend(diff(old[key], new[key], here))
    return changes


def document(state: dict[str, Any], agent_state: dict[str, Any]) -> dict[str, Any]:
    """The one document a checkpoint page shows and compares: the save state plus the agent's own."""
    return {**state, "agent_state": agent_state}


@dataclass
class CompareChoices:
    """The checkpoints a checkpoint page offers to compare with, and the one asked for by number."""

    quick: list[tuple[str, Checkpoint]]
    by_id: dict[int | None, Checkpoint]
    asked: Checkpoint | None


def compare_choices(checkpoint: Checkpoint, mission: Mission, *, against_id: int | None, seq: int | None) -> CompareChoices:
    """One query, a handful of rows: the parent, the previous and the next checkpoint by number, the
    last verified one, the current head, the one asked for by id and the one asked for by number."""
    mine = Checkpoint.objects.filter(mission_id=mission.pk)
    previous = Subquery(mine.filter(seq__lt=checkpoint.seq).order_by("-seq").values("seq")[:1])
    following = Subquery(mine.filter(seq__gt=checkpoint.seq).order_by("seq").values("seq")[:1])
    ids = {pk for pk in (checkpoint.parent_id, mission.last_verified_checkpoint_id, mission.head_checkpoint_id, against_id) if pk}
    wanted = Q(pk__in=ids) | Q(seq=previous) | Q(seq=following) | Q(seq=seq if seq is not None else -1)
    rows = list(mine.filter(wanted).only(*CHECKPOINT_LIST_FIELDS).order_by("seq"))
    by_seq = {c.seq: c for c in rows}
    by_id: dict[int | None, Checkpoint] = {c.pk: c for c in rows}
    before = [c for c in rows if c.seq < checkpoint.seq]
    after = [c for c in rows if c.seq > checkpoint.seq]
    labelled = [
        ("the parent", by_id.get(checkpoint.parent_id)),
        ("the previous one", before[-1] if before else None),
        ("the next one", after[0] if after else None),
        ("the last verified", by_id.get(mission.last_verified_checkpoint_id)),
        ("the current one", by_id.get(mission.head_checkpoint_id)),
    ]
    quick: list[tuple[str, Checkpoint]] = []
    for label, c in labelled:
        if c is not None and c.pk != checkpoint.pk and all(c.pk != shown.pk for _, shown in quick):
            quick.append((label, c))
    return CompareChoices(quick=quick, by_id=by_id, asked=by_seq.get(seq) if seq is not None else None)
