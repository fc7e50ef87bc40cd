"""The ledger section in chunks gathered in groups, and the storage-owned, versioned serialisers
(issue 20, point 4).

A receipt rewrites the one chunk that holds its operation and its group's map, so its cost does not
grow with the ledger; the document (the mission row, every checkpoint's map) holds one ref per
group; every reader (the API's checkpoint, restore, the export) still sees the ledger whole; the
blob collector keeps a chunk while a group it keeps names it; and a mission whose current document
was made by an older format is rebuilt, while the checkpoints written before keep their refs and
their hash."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import tests.test_properties_savestate as rebuild_property
from checkpoints import sections
from checkpoints.models import Blob, Checkpoint, Operation
from checkpoints.services import blobs_get, checkpoint_documents, checkpoint_write, document_hash, ledger_expanded, parts, state_get
from quests.engine import operations as ledger
from quests.models import Approval, Milestone, Mission
from quests.schemas import ApprovalOut, MilestoneOut, MissionSummaryOut, OperationOut, dump
from quests.services import approvals, milestones, missions, operations, records, runs, savestate
from quests.services.audit import Actor

pytestmark = pytest.mark.django_db

CHUNK = 3


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(sections, "LEDGER_CHUNK", CHUNK)


@pytest.fixture
def small_groups(monkeypatch):
    monkeypatch.setattr(sections, "LEDGER_FANOUT", 2)


@pytest.fixture
def actor(alice) -> Actor:
    return Actor(user=alice)


def started(actor: Actor):
    mission, _ = missions.mission_create(actor=actor, title="Nightly sync", objective="Fetch every invoice")
    run, _ = runs.run_start(actor=actor, mission_id=mission.pk)
    return mission, run


def plan(actor: Actor, run, n: int) -> Operation:
    op, _ = operations.operation_plan(actor=actor, run_id=run.pk, key=f"op-{n}", kind="fetch", target=f"t{n}", request={"n": n})
    return op


def current_refs(mission: Mission) -> dict[str, str]:
    return savestate.current_document(Mission.objects.get(pk=mission.pk))[0]


def full_refs(mission: Mission) -> dict[str, str]:
    return parts(savestate.state_document(Mission.objects.get(pk=mission.pk)))[0]


def expanded(refs: dict[str, str]) -> dict[str, str]:
    """A document's refs with each ledger group replaced by its chunks' refs, as readers see them."""
    return ledger_expanded(refs)[0]


def chunk_names(refs: dict[str, str]) -> list[str]:
    return sorted((name for name in expanded(refs) if sections.chunk_of(name)), key=lambda name: sections.chunk_of(name)[1])


def group_names(refs: dict[str, str]) -> list[str]:
    return sorted(sections.ledger_groups(refs), key=sections.group_of)


def test_the_ledger_is_kept_in_chunks_that_equal_the_rebuild(actor, small_chunks):
    mission, run = started(actor)
    ops = [plan(actor, run, n) for n in range(8)]
    refs = current_refs(mission)
    assert "operations" not in refs and not any(sections.chunk_of(name) for name in refs)
    assert group_names(refs) == [sections.group_key(ops[0].pk)]
    assert chunk_names(refs) == [sections.chunk_key("operations", ops[i].pk) for i in (0, 3, 6)]
    assert refs == full_refs(mission)
    operations.operation_attempt(actor=actor, operation_id=ops[4].pk)
    operations.operation_complete(actor=actor, operation_id=ops[4].pk, external_id="X", external_status="done", receipt={"a": 1})
    operations.operation_observe(actor=actor, operation_id=ops[0].pk, external_status="seen")
    operations.operation_fail(actor=actor, operation_id=ops[7].pk, error="no", retryable=False)
    assert current_refs(mission) == full_refs(mission)


def test_the_chunks_are_gathered_in_groups_and_the_document_holds_one_ref_per_group(actor, small_chunks, small_groups):
    mission, run = started(actor)
    ops = [plan(actor, run, n) for n in range(14)]  # chunks from ops 0, 3, 6, 9, 12; groups of two chunks
    refs = current_refs(mission)
    assert group_names(refs) == [sections.group_key(ops[i].pk) for i in (0, 6, 12)]
    assert not any(sections.chunk_of(name) for name in refs)
    assert chunk_names(refs) == [sections.chunk_key("operations", ops[i].pk) for i in (0, 3, 6, 9, 12)]
    assert Mission.objects.get(pk=mission.pk).state_report["ledger"] == [ops[i].pk for i in (0, 6, 12)]
    assert refs == full_refs(mission)
    # A receipt in the first group rewrites one chunk and that group's map, nothing else.
    operations.operation_attempt(actor=actor, operation_id=ops[4].pk)
    after = current_refs(mission)
    assert {name for name, sha in after.items() if refs[name] != sha} == {sections.group_key(ops[0].pk)}
    assert {name for name, sha in expanded(after).items() if expanded(refs)[name] != sha} == {sections.chunk_key("operations", ops[3].pk)}
    assert after == full_refs(mission)
    state, _ = checkpoint_documents(records.checkpoint_create(actor=actor, run_id=run.pk, agent_state={"step": 1})[0])
    assert [(o["key"], o["status"]) for o in state["operations"]] == [(f"op-{n}", "attempted" if n == 4 else "planned") for n in range(14)]


def test_a_chunk_is_collected_with_the_last_group_that_names_it(actor, small_chunks):
    """A chunk is named only by its group's blob: the collector keeps it while a map or a current
    document names a group that names it, and takes it with the last such group."""
    from checkpoints.pruning import blobs_collect_garbage, blobs_referenced

    mission, run = started(actor)
    ops = [plan(actor, run, n) for n in range(5)]  # chunks from ops 0 and 3, one group
    first, _ = records.checkpoint_create(actor=actor, run_id=run.pk, agent_state={"step": 1})
    operations.operation_attempt(actor=actor, operation_id=ops[4].pk)  # a new second chunk, a new group
    second, _ = records.checkpoint_create(actor=actor, run_id=run.pk, agent_state={"step": 2})
    old, new = expanded(first.state_refs), expanded(second.state_refs)
    group = sections.group_key(ops[0].pk)
    gone = {first.state_refs[group], old[sections.chunk_key("operations", ops[3].pk)]}
    kept = {second.state_refs[group], *new.values()}
    assert old[sections.chunk_key("operations", ops[0].pk)] in kept  # the unchanged chunk is shared
    candidates = blobs_referenced(Checkpoint.objects.filter(pk=first.pk))
    assert gone <= candidates
    assert blobs_collect_garbage(candidates) == 0  # the first checkpoint still names them
    Checkpoint.objects.filter(parent=first).update(parent=None)
    Checkpoint.objects.filter(pk=first.pk).delete()
    blobs_collect_garbage(candidates)
    assert not Blob.objects.filter(sha256__in=gone).exists()
    assert Blob.objects.filter(sha256__in=kept).count() == len(kept)
    state, _ = checkpoint_documents(Checkpoint.objects.get(pk=second.pk))
    assert [o["status"] for o in state["operations"]] == ["planned"] * 4 + ["attempted"]


def test_a_document_of_format_2_is_rebuilt_in_groups_and_its_checkpoints_keep_their_hash(actor, small_chunks):
    """Format 2 kept each chunk's ref in the document itself; a mission it left is rebuilt in
    groups at its next change, and a checkpoint it wrote keeps its refs, its hash and its ledger."""
    mission, run = started(actor)
    for n in range(4):
        plan(actor, run, n)
    row = Mission.objects.get(pk=mission.pk)
    current, pending = savestate.current_document(row)
    chunks = {name: sha for name, sha in expanded(current).items() if sections.chunk_of(name)}
    document = {name: value for name, value in state_get(current, {**blobs_get(list(current.values())), **pending}).items() if name != "operations"}
    document.update(sections.chunks("operations", state_get(current)["operations"]))
    old = checkpoint_write(
        mission_id=mission.pk, run_id=run.pk, parent=None, seq=row.next_checkpoint_seq, trigger="agent", state=document, agent_state={"step": 1}
    )
    assert {name for name in old.state_refs if sections.is_ledger_part(name)} == set(chunks)  # format 2's layout
    Mission.objects.filter(pk=mission.pk).update(
        state_refs={**{name: sha for name, sha in row.state_refs.items() if not sections.is_ledger_part(name)}, **chunks},
        state_report={**row.state_report, "format": 2, "ledger": sorted(sections.chunk_of(name)[1] for name in chunks)},
        head_checkpoint=old,
        next_checkpoint_seq=row.next_checkpoint_seq + 1,
    )
    plan(actor, run, 4)
    assert Mission.objects.get(pk=mission.pk).state_report["format"] == sections.FORMAT
    assert group_names(current_refs(mission)) and current_refs(mission) == full_refs(mission)
    again = Checkpoint.objects.get(pk=old.pk)
    assert again.state_refs == old.state_refs and document_hash(again.state_refs, again.agent_state_refs) == again.hash
    state, _ = checkpoint_documents(again)
    assert [o["key"] for o in state["operations"]] == [f"op-{n}" for n in range(4)]


def test_a_receipt_rewrites_only_the_chunk_of_its_operation(actor, small_chunks, monkeypatch):
    mission, run = started(actor)
    ops = [plan(actor, run, n) for n in range(9)]
    records.checkpoint_create(actor=actor, run_id=run.pk, agent_state={"step": 1})  # stores every chunk
    before = current_refs(mission)
    operations.operation_attempt(actor=actor, operation_id=ops[4].pk)
    read: list[list[int]] = []
    lock = ledger.lock_operation

    def spied(*args, **kwargs):
        locked = lock(*args, **kwargs)
        read.append([item["id"] for item in json.loads(locked.ledger.content)])
        return locked

    monkeypatch.setattr(ledger, "lock_operation", spied)
    operations.operation_complete(actor=actor, operation_id=ops[4].pk, external_id="X", external_status="done")
    after = Mission.objects.get(pk=mission.pk)
    middle = sections.chunk_key("operations", ops[3].pk)
    # The chunk and its group are stored as blobs at once, not carried on the mission row until a checkpoint.
    assert not any(sections.is_ledger_part(name) for name in after.state_pending)
    assert Blob.objects.filter(sha256__in=[expanded(after.state_refs)[middle], after.state_refs[sections.group_key(ops[0].pk)]]).count() == 2
    assert {name for name, sha in expanded(current_refs(mission)).items() if expanded(before)[name] != sha} == {middle}
    assert {name for name, sha in current_refs(mission).items() if before[name] != sha} == {sections.group_key(ops[0].pk)}
    # The chunk is read by an id range, in the lock's statement: never the whole ledger.
    assert read == [[op.pk for op in ops[3:6]]]


def test_a_receipt_costs_the_same_statements_at_any_ledger_length(actor, small_chunks):
    def statements(count: int) -> int:
        _, run = started(actor)
        ops = [plan(actor, run, n) for n in range(count)]
        operations.operation_attempt(actor=actor, operation_id=ops[0].pk)
        with CaptureQueriesContext(connection) as captured:
            operations.operation_complete(actor=actor, operation_id=ops[0].pk, external_id="X", external_status="done")
        return len(captured.captured_queries)

    assert statements(2) == statements(20)


def test_every_reader_sees_the_ledger_whole(actor, agent, small_chunks):
    mission, run = started(actor)
    ops = [plan(actor, run, n) for n in range(7)]
    operations.operation_attempt(actor=actor, operation_id=ops[5].pk)
    checkpoint, _ = records.checkpoint_create(actor=actor, run_id=run.pk, agent_state={"step": 1})
    state, _ = checkpoint_documents(checkpoint)
    assert [(o["key"], o["status"]) for o in state["operations"]] == [(f"op-{n}", "attempted" if n == 5 else "planned") for n in range(7)]
    body = agent.get(f"checkpoints/{checkpoint.pk}").json()
    assert body["state"]["operations"] == state["operations"]
    assert not any(sections.is_ledger_part(name) and name != "operations" for name in body["state"])


def test_the_export_joins_the_ledger_chunks(actor, alice, small_chunks):
    from tests.test_export import export

    _, run = started(actor)
    for n in range(5):
        plan(actor, run, n)
    records.checkpoint_create(actor=actor, run_id=run.pk, agent_state={"step": 1})
    data, _ = export(alice)
    [mission] = data["missions"]
    newest = max(mission["checkpoints"], key=lambda c: c["seq"])
    assert [o["key"] for o in newest["state"]["operations"]] == [f"op-{n}" for n in range(5)]
    assert not any(sections.is_ledger_part(name) and name != "operations" for name in newest["state"])


def test_the_incremental_document_equals_the_rebuild_with_small_chunks(alice, monkeypatch):
    # The property test of issue 10, with chunks and groups small enough for its short ledgers to
    # span several of each.
    monkeypatch.setattr(sections, "LEDGER_CHUNK", 2)
    monkeypatch.setattr(sections, "LEDGER_FANOUT", 2)
    rebuild_property.test_the_current_document_is_always_the_full_rebuild(alice)


def test_a_document_of_an_older_format_is_rebuilt_and_old_checkpoints_keep_their_hash(actor):
    mission, run = started(actor)
    plan(actor, run, 1)
    # A mission as format 1 left it: its ledger one whole section, and a checkpoint holding that.
    row = Mission.objects.get(pk=mission.pk)
    refs = {name: sha for name, sha in row.state_refs.items() if not sections.is_ledger_part(name)}
    current, pending = savestate.current_document(row)
    document = state_get(current, {**blobs_get(list(current.values())), **pending})
    whole, contents = parts({"operations": document["operations"]})
    old = checkpoint_write(
        mission_id=mission.pk,
        run_id=run.pk,
        parent=None,
        seq=row.next_checkpoint_seq,
        trigger="agent",
        state=document,
        agent_state={"step": 1},
    )
    Mission.objects.filter(pk=mission.pk).update(
        state_refs={**refs, **whole},
        state_pending={"operations": contents[whole["operations"]].decode()},
        state_report={k: v for k, v in row.state_report.items() if k not in ("format", "ledger")},
        head_checkpoint=old,
        next_checkpoint_seq=row.next_checkpoint_seq + 1,
    )
    old.refresh_from_db()
    assert "operations" in old.state_refs and document_hash(old.state_refs, old.agent_state_refs) == old.hash
    # The next change rebuilds the current document in this format; the old checkpoint is untouched.
    plan(actor, run, 2)
    current = Mission.objects.get(pk=mission.pk)
    assert current.state_report["format"] == sections.FORMAT
    assert "operations" not in current.state_refs and current_refs(mission) == full_refs(mission)
    again = Checkpoint.objects.get(pk=old.pk)
    assert again.state_refs == old.state_refs and document_hash(again.state_refs, again.agent_state_refs) == again.hash
    state, _ = checkpoint_documents(again)
    assert [o["key"] for o in state["operations"]] == ["op-1"]
    newer, _ = records.checkpoint_create(actor=actor, run_id=run.pk, agent_state={"step": 2})
    assert chunk_names(newer.state_refs) and document_hash(newer.state_refs, newer.agent_state_refs) == newer.hash


def test_the_serialisers_give_the_bytes_format_1_gave(actor):
    """Format 2 changed the ledger's layout, not what an item holds: each item is what the API's
    schemas of format 1's time dumped (without times), so no other section's hash moved."""
    times = {"created_at", "updated_at", "reviewed_at", "decided_at"}
    mission, run = started(actor)
    op = plan(actor, run, 1)
    operations.operation_attempt(actor=actor, operation_id=op.pk)
    operations.operation_complete(actor=actor, operation_id=op.pk, external_id="X", external_status="ok", receipt={"p": [1, 2]})
    milestones.milestone_claim(actor=actor, run_id=run.pk, kind="research_complete", title="Found it", gate=False)
    approvals.approval_request(actor=actor, run_id=run.pk, action="send", payload={"to": "x"}, reason="check")
    row = Operation.objects.get(pk=op.pk)
    assert sections.operation_item(savestate.ledger_row(row)) == dump(OperationOut, row, exclude=times)
    for model, schema, section in ((Approval, ApprovalOut, "approvals"), (Milestone, MilestoneOut, "milestones")):
        [obj] = model.objects.filter(mission=mission)
        [values] = model.objects.filter(pk=obj.pk).values(*sections.COLUMNS[section])
        assert json.dumps(sections.ITEMS[section](values), sort_keys=True) == json.dumps(dump(schema, obj, exclude=times), sort_keys=True)
    current = Mission.objects.get(pk=mission.pk)
    assert sections.mission_item(current) == dump(MissionSummaryOut, current, exclude={"id"})


def test_a_chunk_only_the_current_document_refers_to_is_never_collected(actor, small_chunks):
    from checkpoints.pruning import blobs_collect_garbage

    mission, run = started(actor)
    for n in range(4):
        plan(actor, run, n)
    refs = Mission.objects.get(pk=mission.pk).state_refs
    chunk_blobs = {expanded(refs)[name] for name in chunk_names(refs)} | {refs[name] for name in group_names(refs)}
    assert len(chunk_blobs) == 3  # two chunks and their group
    assert not Checkpoint.objects.filter(mission=mission).exists()
    assert blobs_collect_garbage(chunk_blobs) == 0
    assert Blob.objects.filter(sha256__in=chunk_blobs).count() == len(chunk_blobs)


def test_every_kind_of_change_names_sections_the_services_keep():
    for change, touched in sections.CHANGES.items():
        assert set(touched) <= set(savestate.SECTIONS), change
    with pytest.raises(KeyError):
        sections.touched("something.undeclared")


def test_a_decision_reads_again_only_the_sections_it_touches(actor):
    """A person's decision changes the approvals section: the ledger is not read again, however
    long it is (it was, with every section, before the changes were declared)."""
    mission, run = started(actor)
    for n in range(3):
        plan(actor, run, n)
    approval, _ = approvals.approval_request(actor=actor, run_id=run.pk, action="send", payload={}, reason="check")
    with CaptureQueriesContext(connection) as captured:
        approvals.approval_decide(actor=actor, approval_id=approval.pk, decision="approve")
    sent = "\n".join(q["sql"] for q in captured.captured_queries)
    assert 'FROM "checkpoints_operation"' not in sent
    assert current_refs(mission) == full_refs(mission)


def test_a_chunk_changed_in_place_equals_the_chunks_of_its_items_changed(small_chunks):
    """A receipt rewrites its chunk from the stored bytes (`sections.chunk_with`), dumping only the
    changed item: the result is what `chunks` makes of the items so changed, whatever the other
    items hold (keys named like an item's, commas and brackets in strings, nested objects)."""
    from checkpoints.hashing import canonical_json

    def item(op_id: int, **changed) -> dict:
        return {"id": op_id, "request": {"attempts": [1, {"id": 99}], "note": 'a,]"}['}, "status": "planned", **changed}

    def parts_of(items: list[dict]) -> dict[str, bytes]:
        return {name: canonical_json(value) for name, value in sections.chunks("operations", items)}

    stored = [item(4), item(5), item(6)]
    content = canonical_json(stored)
    changed = item(5, status="completed", receipt={"é": 1.5})
    assert sections.chunk_with(4, content, changed) == parts_of([stored[0], changed, stored[2]])
    # A new operation: after the last item while the chunk has room, else a chunk of its own.
    assert sections.chunk_with(4, canonical_json(stored[:2]), item(7)) == parts_of([*stored[:2], item(7)])
    assert sections.chunk_with(4, content, item(7)) == {sections.chunk_key("operations", 7): canonical_json([item(7)])}
    assert sections.chunk_with(None, b"[]", item(1)) == parts_of([item(1)])
    with pytest.raises(ValueError):
        sections.chunk_with(4, canonical_json([stored[0], stored[2]]), item(5))
