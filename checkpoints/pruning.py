"""Pruning of technical snapshots and garbage collection of blobs, in the lower layer.

Pruning removes old background checkpoints and keeps the tree whole: every checkpoint that stays
is re-parented to its nearest kept ancestor, so "A is an ancestor of B" holds after pruning exactly
when it held before, and every kept checkpoint still reaches the mission's root (a root is never
pruned). Which checkpoints the upper layer must keep (the mission's head, its last verified one)
it passes in: this layer knows nothing about missions beyond their id.

Blob collection deletes a blob only when no checkpoint (state or agent state) and no record
refers to it. A checkpoint refers to blobs through shared reference maps (`checkpoints.refmaps`)
and its agent delta: the collector first deletes the maps no checkpoint names any more, then
keeps every blob a remaining map or a delta refers to, and every ledger chunk a group it keeps
names (a ledger group's blob is a map of chunk refs: `checkpoints.sections`, format 3). Blobs are content-addressed and shared across missions, so a writer may be about to
reuse one at the very moment it looks unreferenced; `blob_writers_guard` closes that race."""

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction
from django.db.models import BooleanField, QuerySet
from django.db.models.expressions import RawSQL

from checkpoints import sections
from checkpoints.models import Blob, Checkpoint, Record, RefMap, Trigger

# Arbitrary but fixed: the advisory lock that blob writers share and the collector takes alone.
BLOB_GC_LOCK = 0x51_0B_6C
DELETE_BATCH = 500


@dataclass(frozen=True)
class Node:
    id: int
    parent_id: int | None
    seq: int
    trigger: str
    verified: bool
    created_at: datetime


@dataclass
class PruneResult:
    pruned: list[int] = field(default_factory=list)
    reparented: int = 0
    blob_candidates: set[str] = field(default_factory=set)


def prunable(nodes: Iterable[Node], *, protected: set[int], older_than: datetime, keep_newest: int) -> set[int]:
    """Which checkpoints may go: unverified background snapshots older than `older_than`, except
    the newest `keep_newest` of them, the protected ones and a root. Every verified, milestone,
    approval, stop, restore and agent checkpoint is kept."""
    background = sorted((n for n in nodes if n.trigger == Trigger.BACKGROUND and not n.verified), key=lambda n: n.seq, reverse=True)
    return {n.id for n in background[keep_newest:] if n.created_at < older_than and n.id not in protected and n.parent_id is not None}


def reparenting(nodes: Iterable[Node], pruned: set[int]) -> dict[int, int | None]:
    """For each kept checkpoint whose parent is pruned: its nearest kept ancestor."""
    parent = {n.id: n.parent_id for n in nodes}
    moves: dict[int, int | None] = {}
    for node_id, parent_id in parent.items():
        if node_id in pruned or parent_id not in pruned:
            continue
        ancestor: int | None = parent_id
        seen: set[int] = set()
        while ancestor is not None and ancestor in pruned and ancestor not in seen:
            seen.add(ancestor)
            ancestor = parent.get(ancestor)
        moves[node_id] = ancestor
    return moves


def checkpoints_prune(*, mission_id: int, protected: set[int], older_than: datetime, keep_newest: int) -> PruneResult:
    """Prune one mission's old background checkpoints. The caller holds the mission's lock, so
    no checkpoint is written onto a parent that is being removed. Returns the pruned ids and the
    blobs they referred to (candidates for `blobs_collect_garbage`)."""
    rows = Checkpoint.objects.filter(mission_id=mission_id).values_list("pk", "parent_id", "seq", "trigger", "verified", "created_at")
    nodes = [Node(*row) for row in rows]
    pruned = prunable(nodes, protected=protected, older_than=older_than, keep_newest=keep_newest)
    if not pruned:
        return PruneResult()
    moves = reparenting(nodes, pruned)
    with transaction.atomic():
        by_parent: dict[int | None, list[int]] = {}
        for child, new_parent in moves.items():
            by_parent.setdefault(new_parent, []).append(child)
        for new_parent, children in by_parent.items():
            Checkpoint.objects.filter(pk__in=children).update(parent_id=new_parent)
        ids = sorted(pruned)
        candidates = blobs_referenced(Checkpoint.objects.filter(pk__in=ids))
        for i in range(0, len(ids), DELETE_BATCH):
            batch = ids[i : i + DELETE_BATCH]
            # Children were re-parented above; unhook the batch from one another first so the
            # delete is set-wise instead of one SET NULL per checkpoint.
            Checkpoint.objects.filter(pk__in=batch).update(parent=None)
            Checkpoint.objects.filter(pk__in=batch).delete()
    return PruneResult(pruned=ids, reparented=len(moves), blob_candidates=candidates)


def blob_writers_guard() -> None:
    """Called by every writer that stores or reuses blobs, inside its transaction: it shares a
    lock that the collector takes alone, so a blob that a writer found and is about to refer to
    cannot be collected before that writer commits. On SQLite every write transaction already
    excludes the others."""
    if connection.vendor == "postgresql" and connection.in_atomic_block:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock_shared(%s)", [BLOB_GC_LOCK])


def blobs_referenced(checkpoints: QuerySet[Checkpoint]) -> set[str]:
    """The blobs these checkpoints refer to (their maps' and their deltas'): candidates for
    `blobs_collect_garbage` once they are deleted."""
    rows = checkpoints.select_related("state_map", "agent_map")
    found: set[str] = set()
    groups: set[str] = set()
    for checkpoint in rows.iterator(chunk_size=2000):
        found.update(checkpoint.state_refs.values())
        groups.update(sections.ledger_groups(checkpoint.state_refs).values())
        found.update(sha for sha in (*checkpoint.agent_map.refs.values(), *checkpoint.agent_delta.values()) if sha)
    return found | chunks_named_by(groups)


def chunks_named_by(groups: Iterable[str]) -> set[str]:
    """The chunk blobs these ledger groups' blobs name (read a batch at a time)."""
    found: set[str] = set()
    wanted = sorted(set(groups))
    for i in range(0, len(wanted), DELETE_BATCH):
        for data in Blob.objects.filter(sha256__in=wanted[i : i + DELETE_BATCH]).values_list("data", flat=True):
            found.update(sections.group_chunks(bytes(data)).values())
    return found


def blobs_collect_garbage(candidates: Iterable[str]) -> int:
    """Delete those of `candidates` that no checkpoint and no record refers to, after the reference
    maps no checkpoint names. Returns how many blobs.

    The check and the delete run while no blob writer is mid-transaction (see
    `blob_writers_guard`): writers wait for the collector, which only reads references."""
    remaining = set(candidates)
    if not remaining:
        return 0
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [BLOB_GC_LOCK])
        maps_collect_garbage()
        remaining -= set(Record.objects.filter(blob_id__in=remaining).values_list("blob_id", flat=True))
        remaining -= referenced_by_checkpoints(remaining)
        remaining -= referenced_by_current_documents(remaining)
        deleted = 0
        ids = sorted(remaining)
        for i in range(0, len(ids), DELETE_BATCH):
            deleted += Blob.objects.filter(sha256__in=ids[i : i + DELETE_BATCH]).delete()[0]
        return deleted


def maps_collect_garbage() -> int:
    """Delete the reference maps no checkpoint names (the caller holds the collector's lock: a
    writer about to name a map that looks unnamed holds the writers' lock until it commits)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                """
                DELETE FROM checkpoints_refmap map
                 WHERE NOT EXISTS (SELECT 1 FROM checkpoints_checkpoint c WHERE c.state_map_id = map.sha256)
                   AND NOT EXISTS (SELECT 1 FROM checkpoints_checkpoint c WHERE c.agent_map_id = map.sha256)
                   AND NOT EXISTS (SELECT 1 FROM checkpoints_checkpoint c WHERE c.report_id = map.sha256)
                """
            )
            return cursor.rowcount
    named: set[str] = set()
    for state_map, agent_map, report in Checkpoint.objects.values_list("state_map_id", "agent_map_id", "report_id").iterator(chunk_size=2000):
        named.update((state_map, agent_map, report))
    unnamed = sorted(set(RefMap.objects.values_list("sha256", flat=True)) - named)
    deleted = 0
    for i in range(0, len(unnamed), DELETE_BATCH):
        deleted += RefMap.objects.filter(sha256__in=unnamed[i : i + DELETE_BATCH]).delete()[0]
    return deleted


def referenced_by_checkpoints(hashes: set[str]) -> set[str]:
    """Which of `hashes` any checkpoint refers to, under any part name: through a reference map
    (every map left is named by a checkpoint once `maps_collect_garbage` ran), an agent delta, or a
    ledger group a map names."""
    if not hashes:
        return set()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                SELECT ref.value FROM checkpoints_refmap map, jsonb_each_text(map.refs) ref WHERE ref.value = ANY(%s)
                UNION
                SELECT ref.value FROM checkpoints_checkpoint c, jsonb_each_text(c.agent_delta) ref WHERE ref.value = ANY(%s)
                UNION
                {_NAMED_BY_GROUPS_PG.format(groups="SELECT part.value FROM checkpoints_refmap map, jsonb_each_text(map.refs) part")}
                """,
                [list(hashes), list(hashes), list(hashes)],
            )
            return {row[0] for row in cursor.fetchall()}
    found: set[str] = set()
    groups: set[str] = set()
    for refs in RefMap.objects.values_list("refs", flat=True).iterator(chunk_size=2000):
        # (A compaction report is a shared map too: its values are no blob references.)
        found.update(hashes.intersection(value for value in refs.values() if isinstance(value, str)))
        groups.update(sections.ledger_groups(refs).values())
    for delta in Checkpoint.objects.values_list("agent_delta", flat=True).iterator(chunk_size=2000):
        found.update(hashes.intersection(delta.values()))
    return found | hashes.intersection(chunks_named_by(groups))


# The chunk refs of the ledger groups `groups` (a SELECT of part refs, aliased `part`, of which
# those named `operations#…` are groups) that are among the hashes asked for (its only parameter).
_NAMED_BY_GROUPS_PG = """SELECT ref.value
                  FROM checkpoints_blob g, jsonb_each_text(convert_from(g.data, 'UTF8')::jsonb) ref
                 WHERE g.sha256 IN ({groups} WHERE part.key LIKE 'operations#%%')
                   AND ref.value = ANY(%s)"""


def referenced_by_current_documents(hashes: set[str]) -> set[str]:
    """Which of `hashes` a mission's current document refers to, its ledger groups' chunks
    included: a ledger group and its chunk are stored when they are made, before any checkpoint
    refers to them. (The mission is the model checkpoints belong to,
    found through the foreign key: this layer does not import it.)"""
    if not hashes:
        return set()
    missions = Checkpoint._meta.get_field("mission").related_model
    if connection.vendor == "postgresql":
        table = connection.ops.quote_name(missions._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                SELECT ref.value FROM {table} m, jsonb_each_text(m.state_refs) ref WHERE ref.value = ANY(%s)
                UNION
                {_NAMED_BY_GROUPS_PG.format(groups=f"SELECT part.value FROM {table} m, jsonb_each_text(m.state_refs) part")}
                """,
                [list(hashes), list(hashes)],
            )
            return {row[0] for row in cursor.fetchall()}
    found: set[str] = set()
    groups: set[str] = set()
    for refs in missions._default_manager.values_list("state_refs", flat=True).iterator(chunk_size=2000):
        found.update(hashes.intersection((refs or {}).values()))
        groups.update(sections.ledger_groups(refs or {}).values())
    return found | hashes.intersection(chunks_named_by(groups))


def blob_writers_guard_expression() -> RawSQL | None:
    """`blob_writers_guard` as an expression, so a writer can take the lock in a statement it sends
    anyway (the one that locks its mission) instead of a round trip of its own."""
    if connection.vendor != "postgresql":
        return None
    return RawSQL("pg_advisory_xact_lock_shared(%s) IS NULL", [BLOB_GC_LOCK], output_field=BooleanField())
