"""Pruning of technical snapshots and blob garbage collection (checkpoints.pruning, driven by
quests.services.snapshots.snapshots_prune): the tree stays connected, every kept kind of
checkpoint is kept, and no blob that anything refers to is ever deleted."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from hypothesis import given, settings as hsettings, strategies as st

from checkpoints import pruning
from checkpoints.models import Blob, Checkpoint, Record, RetentionPolicy, Trigger
from checkpoints.services import blob_put, checkpoint_write
from quests.models import Hold, Mission
from quests.services import snapshots
from quests.services.audit import Actor
from quests.services.missions import mission_create

OLD = timedelta(days=30)
NOW = datetime(2026, 6, 1, tzinfo=UTC)
TRIGGERS = [t.value for t in Trigger]


# ---- the rules, on plain trees -------------------------------------------------------------------


@st.composite
def trees(draw) -> list[pruning.Node]:
    """A random checkpoint tree: each checkpoint's parent is an earlier one (branches included)."""
    size = draw(st.integers(min_value=1, max_value=40))
    nodes: list[pruning.Node] = []
    for i in range(1, size + 1):
        parent = None if i == 1 else draw(st.integers(min_value=1, max_value=i - 1))
        trigger = draw(st.sampled_from(TRIGGERS + ["background"] * 4))
        age = draw(st.integers(min_value=0, max_value=20))
        nodes.append(
            pruning.Node(
                id=i,
                parent_id=parent,
                seq=i,
                trigger=trigger,
                verified=draw(st.booleans()) and draw(st.booleans()),
                created_at=NOW - timedelta(days=age),
            )
        )
    return nodes


def ancestors(parent: dict[int, int | None], node: int) -> list[int]:
    chain = []
    while parent[node] is not None:
        node = parent[node]
        chain.append(node)
    return chain


@given(trees(), st.integers(min_value=0, max_value=5), st.data())
@hsettings(max_examples=300, deadline=None)
def test_pruning_keeps_the_tree_connected_and_every_ancestry(nodes, keep_newest, data):
    protected = set(data.draw(st.lists(st.sampled_from([n.id for n in nodes]), max_size=2)))
    pruned = pruning.prunable(nodes, protected=protected, older_than=NOW - timedelta(days=7), keep_newest=keep_newest)
    moves = pruning.reparenting(nodes, pruned)
    before = {n.id: n.parent_id for n in nodes}
    after = {n.id: moves.get(n.id, n.parent_id) for n in nodes if n.id not in pruned}
    root = nodes[0].id
    assert root not in pruned
    for node in after:
        # Every kept checkpoint still reaches the root through kept checkpoints only...
        chain = ancestors(after, node)
        assert set(chain) <= set(after)
        assert node == root or chain[-1] == root
        # ...and its kept ancestors are exactly the kept ones it had before.
        assert chain == [a for a in ancestors(before, node) if a not in pruned]


@given(trees(), st.integers(min_value=0, max_value=5))
@hsettings(max_examples=300, deadline=None)
def test_pruning_takes_only_old_unverified_background_snapshots_beyond_the_newest(nodes, keep_newest):
    cutoff = NOW - timedelta(days=7)
    pruned = pruning.prunable(nodes, protected=set(), older_than=cutoff, keep_newest=keep_newest)
    by_id = {n.id: n for n in nodes}
    background = sorted((n for n in nodes if n.trigger == "background" and not n.verified), key=lambda n: -n.seq)
    newest = {n.id for n in background[:keep_newest]}
    for node_id in pruned:
        node = by_id[node_id]
        assert node.trigger == "background" and not node.verified
        assert node.created_at < cutoff and node_id not in newest


def test_the_protected_checkpoints_are_never_pruned():
    nodes = [pruning.Node(id=i, parent_id=i - 1 or None, seq=i, trigger="background", verified=False, created_at=NOW - OLD) for i in range(1, 6)]
    assert pruning.prunable(nodes, protected={3, 5}, older_than=NOW, keep_newest=0) == {2, 4}


# ---- against the database -----------------------------------------------------------------------

pytestmark = pytest.mark.django_db


@pytest.fixture
def quest(alice) -> Mission:
    mission, _ = mission_create(actor=Actor(user=alice), title="Offsite", objective="Book a venue")
    return mission


def write(
    mission: Mission, trigger: str, *, parent: Checkpoint | None = None, state: dict | None = None, agent_state: dict | None = None, age: timedelta = OLD
) -> Checkpoint:
    """A checkpoint written straight through the storage layer, aged as asked, made the head."""
    mission.refresh_from_db()
    parent = parent if parent is not None else mission.head_checkpoint
    checkpoint = checkpoint_write(
        mission_id=mission.pk,
        run_id=None,
        parent=parent,
        seq=mission.next_checkpoint_seq,
        trigger=trigger,
        state=state or {"step": mission.next_checkpoint_seq},
        agent_state=agent_state,
    )
    Checkpoint.objects.filter(pk=checkpoint.pk).update(created_at=timezone.now() - age)
    Mission.objects.filter(pk=mission.pk).update(head_checkpoint=checkpoint, next_checkpoint_seq=mission.next_checkpoint_seq + 1)
    return checkpoint


def policy(days: int = 7, keep: int = 0) -> None:
    RetentionPolicy.objects.create(snapshot_prune_days=days, snapshot_keep_newest=keep)


def kept(mission: Mission) -> dict[int, int | None]:
    return dict(Checkpoint.objects.filter(mission=mission).values_list("seq", "parent__seq"))


def every_reference_resolves() -> bool:
    refs: set[str] = set()
    for checkpoint in Checkpoint.objects.with_refs():
        refs |= set(checkpoint.state_refs.values()) | set(checkpoint.agent_state_refs.values())
    refs |= set(Record.objects.exclude(blob=None).values_list("blob_id", flat=True))
    return refs <= set(Blob.objects.values_list("sha256", flat=True))


def test_it_prunes_old_background_snapshots_and_reparents_their_children(quest):
    policy()
    write(quest, "agent")  # 1 root
    write(quest, "background")  # 2 pruned
    write(quest, "background")  # 3 pruned
    write(quest, "milestone")  # 4 -> 1
    write(quest, "background")  # 5 pruned
    write(quest, "stop")  # 6 -> 4
    write(quest, "background", age=timedelta(days=1))  # 7 young: kept
    write(quest, "agent")  # 8 head
    result = snapshots.snapshots_prune()
    assert result["checkpoints"] == 3
    assert kept(quest) == {1: None, 4: 1, 6: 4, 7: 6, 8: 7}
    assert every_reference_resolves()


def test_it_keeps_every_kind_but_background_and_every_verified_snapshot(quest):
    policy()
    for trigger in ["agent", "approval", "milestone", "stop", "restore", "agent"]:
        write(quest, trigger)
    verified = write(quest, "background")
    Checkpoint.objects.filter(pk=verified.pk).update(verified=True)
    write(quest, "agent")
    assert snapshots.snapshots_prune()["checkpoints"] == 0
    assert len(kept(quest)) == 8


def test_it_keeps_the_newest_background_snapshots_per_mission(quest):
    policy(keep=2)
    write(quest, "agent")
    for _ in range(5):
        write(quest, "background")
    write(quest, "agent")
    snapshots.snapshots_prune()
    assert sorted(kept(quest)) == [1, 5, 6, 7]


def test_it_never_prunes_the_head_or_the_last_verified_checkpoint(quest):
    policy()
    write(quest, "agent")
    verified = write(quest, "background")
    write(quest, "background")
    head = write(quest, "background")
    Mission.objects.filter(pk=quest.pk).update(last_verified_checkpoint=verified)
    snapshots.snapshots_prune()
    assert sorted(kept(quest)) == [1, 2, 4]
    assert Mission.objects.get(pk=quest.pk).head_checkpoint_id == head.pk


def test_it_leaves_a_mission_under_a_staff_hold_alone(quest, alice):
    policy()
    write(quest, "agent")
    write(quest, "background")
    write(quest, "agent")
    Hold.objects.create(mission=quest, reason="legal", placed_by=alice)
    assert snapshots.snapshots_prune()["held_missions"] == 1
    assert len(kept(quest)) == 3
    Hold.objects.update(released_at=timezone.now())
    assert snapshots.snapshots_prune()["checkpoints"] == 1


def test_it_keeps_a_branch_point_reachable_after_a_restore(quest):
    policy()
    write(quest, "agent")  # 1
    target = write(quest, "background")  # 2 (restored from: pruned)
    write(quest, "background")  # 3 pruned (abandoned branch)
    write(quest, "agent")  # 4 -> 1
    write(quest, "restore", parent=target)  # 5 -> 1
    write(quest, "agent")  # 6 head
    snapshots.snapshots_prune()
    assert kept(quest) == {1: None, 4: 1, 5: 1, 6: 5}


def test_it_deletes_the_blobs_only_pruned_snapshots_referred_to_and_no_other(quest, alice):
    policy()
    write(quest, "agent", state={"shared": "kept by the head"})
    doomed = write(quest, "background", state={"shared": "kept by the head", "only": "in the pruned one"})
    write(quest, "agent", state={"shared": "kept by the head"}, agent_state={"x": "agent part"})
    other, _ = mission_create(actor=Actor(user=alice), title="Other", objective="o")
    write(other, "agent", state={"elsewhere": "in the pruned one"})  # the same bytes under another name
    only_pruned = write(quest, "background", state={"gone": "for good"}, age=OLD)
    write(quest, "agent", state={"shared": "kept by the head"})
    tool_sha, _ = blob_put(b"raw tool output")
    Record.objects.create(mission=quest, kind="tool_output", text="raw", blob_id=tool_sha, archived=True)
    gone_sha = only_pruned.state_refs["gone"]

    result = snapshots.snapshots_prune()
    assert result["checkpoints"] == 2
    assert not Checkpoint.objects.filter(pk__in=[doomed.pk, only_pruned.pk]).exists()
    assert not Blob.objects.filter(sha256=gone_sha).exists()
    assert Blob.objects.filter(sha256=doomed.state_refs["only"]).exists()
    assert Blob.objects.filter(sha256=tool_sha).exists()
    assert every_reference_resolves()


def test_a_blob_referenced_by_a_record_is_never_collected(quest):
    sha, _ = blob_put(b"archived note")
    Record.objects.create(mission=quest, kind="note", text="archived", blob_id=sha, archived=True)
    assert pruning.blobs_collect_garbage({sha}) == 0
    assert Blob.objects.filter(sha256=sha).exists()


def test_an_unreferenced_blob_is_collected():
    sha, _ = blob_put(b"nobody wants me")
    assert pruning.blobs_collect_garbage({sha}) == 1
    assert not Blob.objects.filter(sha256=sha).exists()


@pytest.mark.django_db(transaction=True)
def test_a_blob_a_writer_is_about_to_reuse_survives_a_collection_running_at_that_moment(quest):
    """The writer found the blob (so it will not store it again) but has not committed the
    checkpoint that refers to it yet; the collector must wait for it rather than delete."""
    sha, _ = blob_put(b'"reused"')
    found = threading.Event()
    release = threading.Event()
    collected: list[int] = []

    def writer() -> None:
        try:
            with transaction.atomic():
                write(quest, "agent", state={"part": "reused"})
                found.set()
                release.wait(10)
        finally:
            connection.close()

    def collector() -> None:
        try:
            collected.append(pruning.blobs_collect_garbage({sha}))
        finally:
            connection.close()

    w = threading.Thread(target=writer)
    w.start()
    assert found.wait(10)
    c = threading.Thread(target=collector)
    c.start()
    c.join(1.0)
    assert c.is_alive(), "the collector must wait for the writer's transaction"
    release.set()
    w.join(10)
    c.join(10)
    assert collected == [0]
    assert Blob.objects.filter(sha256=sha).exists()
    assert every_reference_resolves()
