"""Checkpoints as stored save state: immutable, numbered per mission, chained, content-addressed."""

import json

import pytest

from checkpoints import sections
from checkpoints.models import Blob, Checkpoint, Record
from checkpoints.services import (
    blobs_get,
    canonical_json,
    checkpoint_agent_state,
    checkpoint_documents,
    document_hash,
    parts_get,
    sha256_hex,
)
from quests.models import Mission
from quests.services import milestones, missions, operations, records, runs
from quests.services.audit import Actor
from quests.services.checkpointing import take_checkpoint
from quests.services.tokens import token_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def person(alice) -> Actor:
    return Actor(user=alice)


@pytest.fixture
def agent(alice) -> Actor:
    token, _ = token_create(user=alice, name="savestate-agent")
    return Actor(user=alice, token=token)


def new_mission(agent: Actor, title: str = "Offsite") -> Mission:
    mission, _ = missions.mission_create(actor=agent, title=title, objective="Book", constraints=["Before Friday"])
    return mission


def start(agent: Actor, mission: Mission):
    run, _ = runs.run_start(actor=agent, mission_id=mission.pk)
    return run


def save(agent: Actor, run, state: dict) -> Checkpoint:
    checkpoint, _ = records.checkpoint_create(actor=agent, run_id=run.pk, agent_state=state)
    return checkpoint


def frozen(checkpoint: Checkpoint) -> dict:
    row = Checkpoint.objects.filter(pk=checkpoint.pk).values("seq", "parent_id", "trigger", "hash", "size_bytes", "record_watermark", "run_id").get()
    stored = Checkpoint.objects.with_refs().get(pk=checkpoint.pk)
    state, agent_state = checkpoint_documents(stored)
    refs = {"state_refs": stored.state_refs, "agent_state_refs": stored.agent_state_refs}
    return {**row, **refs, "state": state, "agent_state": agent_state}


def test_a_checkpoint_never_changes_after_it_is_written(agent, person):
    mission = new_mission(agent)
    run = start(agent, mission)
    records.record_create(actor=agent, run_id=run.pk, kind="decision", text="Lakeside")
    first = save(agent, run, {"plan": ["a"], "step": 1})
    before = frozen(first)
    # Everything that happens afterwards: more records, operations, checkpoints, a stop, a restore.
    records.record_create(actor=agent, run_id=run.pk, kind="decision", text="Hilltop")
    missions.constraint_add(actor=person, mission_id=mission.pk, text="Budget 5k")
    op, _ = operations.operation_plan(actor=agent, run_id=run.pk, key="k", kind="email", target="t", request={})
    operations.operation_attempt(actor=agent, operation_id=op.pk)
    save(agent, run, {"plan": ["a", "b"], "step": 2})
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external")
    missions.mission_restore(actor=person, mission_id=mission.pk, checkpoint_id=first.pk)
    assert frozen(first) == before
    assert [d["text"] for d in before["state"]["decisions"]] == ["Lakeside"]


def test_a_checkpoints_hash_is_the_hash_of_its_content(agent):
    run = start(agent, new_mission(agent))
    checkpoint = save(agent, run, {"a": 1, "b": {"c": [1, 2]}})
    assert document_hash(checkpoint.state_refs, checkpoint.agent_state_refs) == checkpoint.hash
    contents = blobs_get(list(checkpoint.state_refs.values()) + list(checkpoint.agent_state_refs.values()))
    for sha, data in contents.items():
        assert sha256_hex(data) == sha
    state, agent_state = checkpoint_documents(checkpoint)
    for key, value in agent_state.items():
        assert sha256_hex(canonical_json(value)) == checkpoint.agent_state_refs[key]
    # Each stored part is addressed by its content; a section stored in chunks (the ledger,
    # checkpoints.sections) is read whole again from its parts.
    stored = parts_get(checkpoint.state_refs)
    for key, value in stored.items():
        assert sha256_hex(canonical_json(value)) == checkpoint.state_refs[key]
    assert state == sections.merged(stored)
    assert "operations" in state


def test_canonical_json_ignores_key_order_and_whitespace():
    assert canonical_json({"b": 1, "a": [1, {"y": 2, "x": 1}]}) == canonical_json(json.loads('{ "a": [1, {"x": 1, "y": 2}], "b": 1 }'))
    assert canonical_json({"a": "é"}) == '{"a":"é"}'.encode()


def test_equal_content_has_an_equal_hash(agent):
    run = start(agent, new_mission(agent))
    first = save(agent, run, {"b": [1, 2], "a": {"y": 1, "x": 2}})
    second = save(agent, run, {"a": {"x": 2, "y": 1}, "b": [1, 2]})
    assert first.pk != second.pk
    assert second.hash == first.hash
    third = save(agent, run, {"a": {"x": 2, "y": 1}, "b": [2, 1]})
    assert third.hash != first.hash


def test_the_hash_covers_the_mission_state_too(agent):
    mission = new_mission(agent)
    run = start(agent, mission)
    first = save(agent, run, {"a": 1})
    records.record_create(actor=agent, run_id=run.pk, kind="decision", text="Lakeside")
    second = save(agent, run, {"a": 1})
    assert second.agent_state_refs == first.agent_state_refs
    assert second.hash != first.hash


def test_seq_counts_per_mission(agent):
    one, two = new_mission(agent, "one"), new_mission(agent, "two")
    run_one, run_two = start(agent, one), start(agent, two)
    seqs = {one.pk: [], two.pk: []}
    for i in range(3):
        seqs[one.pk].append(save(agent, run_one, {"i": i}).seq)
        seqs[two.pk].append(save(agent, run_two, {"i": i}).seq)
    assert seqs == {one.pk: [1, 2, 3], two.pk: [1, 2, 3]}


def test_every_kind_of_checkpoint_takes_the_next_seq(agent, person):
    mission = new_mission(agent)
    run = start(agent, mission)
    save(agent, run, {"a": 1})
    milestones.milestone_claim(actor=agent, run_id=run.pk, kind="custom", title="m")
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external")
    triggers = list(Checkpoint.objects.filter(mission=mission).order_by("seq").values_list("seq", "trigger"))
    assert triggers == [(1, "agent"), (2, "milestone"), (3, "stop")]


def test_checkpoints_chain_to_their_parents(agent):
    mission = new_mission(agent)
    run = start(agent, mission)
    made = [save(agent, run, {"i": i}) for i in range(4)]
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external")
    chain = []
    node = Mission.objects.get(pk=mission.pk).head_checkpoint
    while node is not None:
        chain.append(node.seq)
        node = node.parent
    assert chain == [5, 4, 3, 2, 1]
    assert made[0].parent_id is None


def test_take_checkpoint_moves_the_head(agent):
    mission = new_mission(agent)
    first = take_checkpoint(Mission.objects.get(pk=mission.pk), trigger="background")
    second = take_checkpoint(Mission.objects.get(pk=mission.pk), trigger="background")
    stored = Mission.objects.get(pk=mission.pk)
    assert (first.seq, second.seq, second.parent_id) == (1, 2, first.pk)
    assert stored.head_checkpoint_id == second.pk
    assert stored.next_checkpoint_seq == 3


def test_unchanged_agent_state_keys_are_stored_once(agent):
    run = start(agent, new_mission(agent))
    state = {f"key{i:02}": {"text": f"{i}" * 1000} for i in range(20)}
    first = save(agent, run, state)
    blobs = Blob.objects.count()
    changed = {**state, "key07": {"text": "changed" * 150}}
    second = save(agent, run, changed)
    third = save(agent, run, changed)
    differing = {k for k in state if first.agent_state_refs[k] != second.agent_state_refs[k]}
    assert differing == {"key07"}
    assert third.agent_state_refs == second.agent_state_refs
    # One new blob for the changed key; the state document did not change between these writes.
    assert Blob.objects.count() == blobs + 1
    changed_size = len(canonical_json(changed["key07"]))
    assert second.new_bytes <= 2 * changed_size + 1024
    assert third.new_bytes == 0
    assert checkpoint_agent_state(first) == state
    assert checkpoint_agent_state(second) == changed


def test_system_checkpoints_carry_the_heads_agent_state_at_no_cost(agent, person):
    mission = new_mission(agent)
    run = start(agent, mission)
    head = save(agent, run, {"big": "x" * 5000})
    missions.mission_pause(actor=person, mission_id=mission.pk)
    stop = Mission.objects.get(pk=mission.pk).head_checkpoint
    assert stop.trigger == "stop"
    assert stop.agent_state_refs == head.agent_state_refs
    assert checkpoint_agent_state(stop) == {"big": "x" * 5000}
    assert stop.new_bytes < 5000


def test_tool_output_is_archived_as_a_blob_with_a_preview(agent, settings):
    mission = new_mission(agent)
    run = start(agent, mission)
    raw = "".join(f"row {i}: {'data ' * 20}\n" for i in range(400))
    record, _ = records.record_create(actor=agent, run_id=run.pk, kind="tool_output", text=raw)
    record.refresh_from_db()
    assert record.archived is True
    assert bytes(Blob.objects.get(pk=record.blob_id).data).decode() == raw
    assert len(record.text) <= settings.QUESTLOG_PREVIEW_CHARS
    assert raw.startswith(record.text.rstrip("…"))
    assert record.size_bytes == len(raw.encode())
    checkpoint = save(agent, run, {})
    state, _ = checkpoint_documents(checkpoint)
    assert [(t["id"], t["blob"], t["preview"]) for t in state["tool_outputs"]] == [(record.pk, record.blob_id, record.text)]
    assert checkpoint.size_bytes < len(raw.encode())


def test_the_state_document_holds_the_save_state(agent, person):
    mission = new_mission(agent)
    run = start(agent, mission)
    for kind in ("decision", "open_question", "blocker", "dependency", "evidence", "note"):
        records.record_create(actor=agent, run_id=run.pk, kind=kind, text=f"a {kind}")
    operations.operation_plan(actor=agent, run_id=run.pk, key="k", kind="email", target="t", request={"a": 1})
    state, _ = checkpoint_documents(save(agent, run, {}))
    assert state["mission"]["objective"] == "Book"
    assert [c["text"] for c in state["constraints"]] == ["Before Friday"]
    for section, kind in (("decisions", "decision"), ("open_questions", "open_question"), ("blockers", "blocker"), ("dependencies", "dependency")):
        assert [r["text"] for r in state[section]] == [f"a {kind}"]
    assert [e["preview"] for e in state["evidence"]] == ["a evidence"]
    assert [n["text"] for n in state["notes"]] == ["a note"]
    assert [(o["key"], o["status"]) for o in state["operations"]] == [("k", "planned")]


def test_the_record_watermark_is_the_newest_record_seen(agent):
    run = start(agent, new_mission(agent))
    first, _ = records.record_create(actor=agent, run_id=run.pk, kind="note", text="one")
    checkpoint = save(agent, run, {})
    assert checkpoint.record_watermark == first.pk
    second, _ = records.record_create(actor=agent, run_id=run.pk, kind="note", text="two")
    assert save(agent, run, {}).record_watermark == second.pk
    assert Record.objects.count() == 2


def test_a_system_checkpoint_carries_the_agent_state_the_runs_lock_read_while_it_is_the_head(agent):
    """A checkpoint written after a run's lock (an approval's, a stop's) carries the head's agent
    state as the lock read it, without reading the head again; once a checkpoint of the same
    transaction moved the head, the new head's is carried."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from quests.services import tokens

    run = start(agent, new_mission(agent))
    save(agent, run, {"plan": "venues", "n": 1})
    with transaction.atomic():
        _, locked = tokens.run_locked_for(agent, run.pk)
        locked_head = Checkpoint.objects.get(pk=locked.mission.head_checkpoint_id)
        with CaptureQueriesContext(connection) as captured:
            carried = take_checkpoint(locked.mission, trigger="stop", run=run, guarded=True)
        assert not [q for q in captured.captured_queries if 'FROM "checkpoints_checkpoint"' in q["sql"]]  # the head is not read
        assert (carried.agent_state_refs, carried.agent_state_bytes) == (locked_head.agent_state_refs, locked_head.agent_state_bytes)
        moved = take_checkpoint(locked.mission, trigger="agent", run=run, agent_state={"plan": "book", "n": 2}, guarded=True)
        after = take_checkpoint(locked.mission, trigger="stop", run=run, guarded=True)
        assert (after.agent_state_refs, after.agent_state_bytes) == (moved.agent_state_refs, moved.agent_state_bytes)
    assert checkpoint_agent_state(Checkpoint.objects.get(pk=after.pk)) == {"plan": "book", "n": 2}
