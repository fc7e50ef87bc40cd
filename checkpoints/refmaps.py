"""Reference maps ({part name: blob sha256}) stored once and shared.

A checkpoint used to carry its two maps in its own row: the save state's sections (which change
only when a section changes) and the agent state's keys (of which an agent usually changes one or
two per checkpoint). Both repeated ~2.6 KB of references on every row. Now:

- a map is a row of `checkpoints_refmap`, addressed by the sha256 of its canonical JSON, written
  `ON CONFLICT DO NOTHING`: checkpoints whose map did not change point at the same row;
- the agent state is a *base* map plus a small *delta* kept in the checkpoint row ({key: sha256},
  or null for a key the base has and the checkpoint does not). A checkpoint inherits its parent's
  base and delta and adds the keys that changed; when the delta would pass `MAX_DELTA` keys it is
  re-based (its whole map becomes a new base, with an empty delta). Reading stays one join:
  `resolved(base, delta)` here, `quests.engine.sql.refmaps` in SQL.

A checkpoint's hash is taken over the resolved maps (`checkpoints.services.document_hash`), so
how they are stored never changes it."""

from collections.abc import Mapping
from dataclasses import dataclass, field

from checkpoints.hashing import canonical_json, sha256_hex

# Keys a delta holds before the checkpoint is re-based. A delta key costs ~90 B in the row; a new
# base costs the whole map (~1.7 KB for 20 keys) once: with one or two keys changing per
# checkpoint, four keys re-base about every third checkpoint at worst, and never when the agent
# keeps changing the same keys.
MAX_DELTA = 4

Refs = dict[str, str]
Delta = dict[str, str | None]


def map_sha(refs: Mapping[str, str]) -> str:
    """A map's address: the sha256 of its canonical JSON."""
    return sha256_hex(canonical_json(dict(refs)))


def resolved(base: Mapping[str, str] | None, delta: Mapping[str, str | None] | None) -> Refs:
    """The map a base and a delta stand for (null in the delta removes the key)."""
    merged: dict[str, str | None] = {**(base or {}), **(delta or {})}
    return {key: sha for key in sorted(merged) if (sha := merged[key]) is not None}


@dataclass(frozen=True)
class AgentLayout:
    """How a checkpoint stores its agent-state refs: its base map's address, its delta on it, the
    refs they resolve to, and the maps that must exist for it ({address: map})."""

    base: str
    delta: Delta
    refs: Refs
    new_maps: dict[str, Refs] = field(default_factory=dict)


def agent_layout(refs: Mapping[str, str], parent: AgentLayout | None) -> AgentLayout:
    """The layout of agent refs `refs` written after `parent` (None: the first, or unknown)."""
    refs = dict(refs)
    if parent is not None:
        delta = dict(parent.delta)
        for key in parent.refs.keys() | refs.keys():
            if parent.refs.get(key) != refs.get(key):
                delta[key] = refs.get(key)
        if len(delta) <= MAX_DELTA:
            return AgentLayout(base=parent.base, delta=delta, refs=refs)
    base = map_sha(refs)
    return AgentLayout(base=base, delta={}, refs=refs, new_maps={base: refs})
