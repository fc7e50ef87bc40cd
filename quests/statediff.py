"""Key-by-key difference between two checkpoint states, for people to read (the checkpoint page).
Lists of items with an `id` (constraints, records, operations…) are matched by id, so an item that
moved or changed one field shows as that one change, not as a removed and an added list."""

from dataclasses import dataclass
from typing import Any

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
