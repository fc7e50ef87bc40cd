"""Shared reference maps (checkpoints.refmaps): a checkpoint names its state map and its agent
state's base map with a small delta, instead of repeating both maps in its row. Its hash, its
refs and what it reads back are the same as before; the blob collector keeps every blob a shared
map refers to and deletes a map with the last checkpoint that names it; the migration that moved
existing checkpoints' maps keeps their hashes valid. Runs on PostgreSQL and on SQLite."""

import pytest

from checkpoints import pruning, refmaps
from checkpoints.models import Blob, Checkpoint, RefMap
from checkpoints.services import checkpoint_documents, checkpoint_write, document_hash, parts
from quests.models import Mission
from quests.services.audit import Actor
from quests.services.missions import mission_create
from tests import migrating

pytestmark = pytest.mark.django_db
STATE = {f"k{i}": {"text": "x" * 100, "n": i} for i in range(8)}


# ---- the layout, on plain maps ----------------------------------------------------------------------


def test_a_delta_grows_with_the_keys_that_changed_and_re_bases_past_the_limit():
    first = refmaps.agent_layout({"a": "1", "b": "2"}, None)
    assert first.delta == {} and first.new_maps == {first.base: {"a": "1", "b": "2"}}
    second = refmaps.agent_layout({"a": "9", "b": "2", "c": "3"}, first)
    assert (second.base, second.delta, second.new_maps) == (first.base, {"a": "9", "c": "3"}, {})
    third = refmaps.agent_layout({"a": "8", "c": "3"}, second)  # a changed again, b removed
    assert third.delta == {"a": "8", "b": None, "c": "3"} and third.base == first.base
    assert refmaps.resolved({"a": "1", "b": "2"}, third.delta) == {"a": "8", "c": "3"}
    many = refmaps.agent_layout({key: key for key in "defgh"}, third)
    assert many.delta == {} and many.base == refmaps.map_sha({key: key for key in "defgh"}) and many.new_maps


# ---- the engine's writes ------------------------------------------------------------------------------


def post(agent, run, state: dict) -> Checkpoint:
    answer = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": state})
    assert answer.status_code == 201, answer.content
    return Checkpoint.objects.with_refs().get(pk=answer.json()["id"])


def test_agent_checkpoints_share_their_maps_and_keep_their_hashes(agent, run):
    state = dict(STATE)
    written = [post(agent, run, state)]
    for n in range(6):  # the same key changes each time: the delta stays one key
        state = {**state, "k0": {"text": "changed", "n": n}}
        written.append(post(agent, run, state))
    first = written[0]
    assert {cp.state_map_id for cp in written} == {first.state_map_id}
    assert {cp.agent_map_id for cp in written} == {first.agent_map_id}
    assert [len(cp.agent_delta) for cp in written] == [0, 1, 1, 1, 1, 1, 1]
    for checkpoint in written:
        refs, _ = parts(checkpoint_documents(checkpoint)[1])
        assert checkpoint.agent_state_refs == refs
        assert document_hash(checkpoint.state_refs, checkpoint.agent_state_refs) == checkpoint.hash
    assert checkpoint_documents(written[-1])[1] == state

    for i in range(1, refmaps.MAX_DELTA + 2):  # more keys than a delta holds: a new base
        state = {**state, f"k{i}": {"text": "changed", "n": i}}
    rebased = post(agent, run, state)
    assert rebased.agent_map_id != first.agent_map_id and rebased.agent_delta == {}
    assert rebased.agent_state_refs == parts(state)[0]
    assert checkpoint_documents(rebased)[1] == state
    removed = post(agent, run, {key: value for key, value in state.items() if key != "k7"})
    assert removed.agent_map_id == rebased.agent_map_id and removed.agent_delta == {"k7": None}
    assert "k7" not in removed.agent_state_refs
    assert document_hash(removed.state_refs, removed.agent_state_refs) == removed.hash


# ---- the blob collector ---------------------------------------------------------------------------------


@pytest.fixture
def quest(alice) -> Mission:
    mission, _ = mission_create(actor=Actor(user=alice), title="Offsite", objective="Book a venue")
    return mission


def write(mission: Mission, trigger: str, *, state: dict, agent_state: dict | None = None) -> Checkpoint:
    mission.refresh_from_db()
    parent = Checkpoint.objects.with_refs().get(pk=mission.head_checkpoint_id) if mission.head_checkpoint_id else None
    checkpoint = checkpoint_write(
        mission_id=mission.pk, run_id=None, parent=parent, seq=mission.next_checkpoint_seq, trigger=trigger, state=state, agent_state=agent_state
    )
    Mission.objects.filter(pk=mission.pk).update(head_checkpoint=checkpoint, next_checkpoint_seq=checkpoint.seq + 1)
    return checkpoint


def prune(mission: Mission, checkpoint: Checkpoint) -> None:
    """Prune `checkpoint` (an old background snapshot) and collect what it referred to."""
    Checkpoint.objects.filter(pk=checkpoint.pk).update(created_at=checkpoint.created_at.replace(year=2000))
    result = pruning.checkpoints_prune(mission_id=mission.pk, protected=set(), older_than=checkpoint.created_at, keep_newest=0)
    assert result.pruned == [checkpoint.pk]
    pruning.blobs_collect_garbage(result.blob_candidates)


def test_a_blob_only_a_shared_map_refers_to_survives_pruning_the_checkpoint_that_stored_it(quest):
    write(quest, "agent", state={"root": 1})
    agent_state = {f"key{i}": f"only in the base {i}" for i in range(refmaps.MAX_DELTA + 1)}  # a base of its own
    doomed = write(quest, "background", state={"shared": "only in the map"}, agent_state=agent_state)
    kept = write(quest, "agent", state={"shared": "only in the map"})  # same maps, by reference
    assert doomed.agent_delta == {}
    assert (kept.state_map_id, kept.agent_map_id, kept.agent_delta) == (doomed.state_map_id, doomed.agent_map_id, {})
    prune(quest, doomed)
    assert RefMap.objects.filter(sha256__in=[kept.state_map_id, kept.agent_map_id]).count() == 2
    shas = [doomed.state_refs["shared"], *doomed.agent_state_refs.values()]
    assert Blob.objects.filter(sha256__in=shas).count() == len(shas)
    state, read_agent_state = checkpoint_documents(Checkpoint.objects.with_refs().get(pk=kept.pk))
    assert (state["shared"], read_agent_state) == ("only in the map", agent_state)


def test_a_map_no_checkpoint_names_is_collected_with_its_checkpoint(quest):
    write(quest, "agent", state={"root": 1})
    own_agent_state = {f"mine{i}": f"mine {i}" for i in range(refmaps.MAX_DELTA + 1)}
    doomed = write(quest, "background", state={"gone": "for good"}, agent_state=own_agent_state)
    after = write(quest, "agent", state={"root": 2}, agent_state={f"other{i}": f"other {i}" for i in range(refmaps.MAX_DELTA + 1)})
    assert doomed.agent_map_id not in (after.agent_map_id,) and doomed.agent_delta == {}
    prune(quest, doomed)
    assert not RefMap.objects.filter(sha256__in=[doomed.state_map_id, doomed.agent_map_id]).exists()
    assert not Blob.objects.filter(sha256__in=[doomed.state_refs["gone"], *doomed.agent_state_refs.values()]).exists()
    assert RefMap.objects.filter(sha256__in=[after.state_map_id, after.agent_map_id]).count() == 2


# ---- the migration -----------------------------------------------------------------------------------------

BEFORE = [("checkpoints", "0008_checkpoint_branch_points")]


@pytest.mark.long
@pytest.mark.django_db(transaction=True)
def test_the_migration_moves_existing_maps_out_of_the_rows_and_keeps_every_hash_valid():
    old = migrating.migrate_back(BEFORE)
    owner = old.get_model("auth", "User").objects.create(username="before-maps")
    mission = old.get_model("quests", "Mission").objects.create(owner=owner, title="Old", objective="o")
    OldCheckpoint = old.get_model("checkpoints", "Checkpoint")
    state = {"mission": "a" * 64, "records": "b" * 64}
    agent: dict[str, str] = {f"k{i}": f"{i}" * 64 for i in range(6)}
    histories = []
    parent = None
    for seq in range(1, 9):
        if seq == 3:
            agent = {**agent, "k0": "c" * 64}
        if seq == 4:
            agent = {key: sha for key, sha in agent.items() if key != "k5"}
        if seq == 6:
            agent = {f"n{i}": f"{i}" * 64 for i in range(6)}  # everything changed: a base of its own
        if seq == 7:
            state = {**state, "records": "d" * 64}
        parent = OldCheckpoint.objects.create(
            mission=mission,
            parent=parent,
            seq=seq,
            trigger="agent",
            hash=document_hash(state, agent),
            state_refs=state,
            agent_state_refs=agent,
        )
        histories.append((parent.pk, dict(state), dict(agent), parent.hash))

    migrating.migrate_forward()  # through 0009, which moves the maps

    for pk, state_refs, agent_refs, digest in histories:
        checkpoint = Checkpoint.objects.with_refs().get(pk=pk)
        assert checkpoint.hash == digest
        assert (checkpoint.state_refs, checkpoint.agent_state_refs) == (state_refs, agent_refs)
        assert document_hash(checkpoint.state_refs, checkpoint.agent_state_refs) == checkpoint.hash
    migrated = {row.pk: row for row in Checkpoint.objects.filter(mission_id=mission.pk)}
    assert len({row.state_map_id for row in migrated.values()}) == 2
    assert len({row.agent_map_id for row in migrated.values()}) == 2
    assert max(len(row.agent_delta) for row in migrated.values()) <= refmaps.MAX_DELTA
