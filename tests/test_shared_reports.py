"""Compaction reports are shared maps (quests 0012/0013): a checkpoint names its report, the
readers see it as before, checkpoints that repeat a report share one row, and the migration moves
the reports of existing checkpoints out of their rows with every hash still valid."""

import pytest

from checkpoints import refmaps
from checkpoints.models import Checkpoint, RefMap
from checkpoints.services import document_hash
from quests.services import records, runs
from quests.services.audit import Actor
from quests.services.missions import mission_create
from tests import migrating

BEFORE = [("quests", "0011_operations_by_mission_and_id")]


@pytest.mark.django_db
def test_checkpoints_that_repeat_a_report_share_one_row_and_read_it_as_before(alice):
    actor = Actor(user=alice)
    mission, _ = mission_create(actor=actor, title="Reports", objective="Keep one report row.")
    run, _ = runs.run_start(actor=actor, mission_id=mission.pk, agent="test")
    for n in range(3):
        records.checkpoint_create(actor=actor, run_id=run.pk, agent_state={"n": n})
    written = list(Checkpoint.objects.filter(mission_id=mission.pk).with_report().order_by("seq"))
    assert len({row.report_id for row in written}) == 1  # nothing was compacted: one report
    head = written[-1]
    assert head.compaction_report["summary"]
    assert RefMap.objects.get(sha256=head.report_id).refs == head.compaction_report
    assert Checkpoint.objects.get(pk=head.pk).compaction_report == head.compaction_report  # unjoined, as before


@pytest.mark.long
@pytest.mark.django_db(transaction=True)
def test_the_migration_moves_existing_reports_out_of_the_rows_and_keeps_every_hash_valid():
    old = migrating.migrate_back(BEFORE)
    owner = old.get_model("auth", "User").objects.create(username="before-reports")
    mission = old.get_model("quests", "Mission").objects.create(owner=owner, title="Old", objective="o")
    OldCheckpoint = old.get_model("quests", "Checkpoint")
    OldRefMap = old.get_model("quests", "RefMap")
    state, agent = {"mission": "a" * 64}, {"k": "b" * 64}
    OldRefMap.objects.create(sha256=refmaps.map_sha(state), refs=state)
    OldRefMap.objects.create(sha256=refmaps.map_sha(agent), refs=agent)
    shared = {"summary": "0 note(s) archived", "kept": {"notes": 3}}
    reports = [shared, shared, {"summary": "1 note(s) archived", "kept": {"notes": 2}}, {}]
    made = []
    for seq, report in enumerate(reports, start=1):
        row = OldCheckpoint.objects.create(
            mission=mission,
            seq=seq,
            trigger="agent",
            hash=document_hash(state, agent),
            state_map_id=refmaps.map_sha(state),
            agent_map_id=refmaps.map_sha(agent),
            compaction_report=report,
        )
        made.append((row.pk, report, row.hash))

    migrating.migrate_forward()

    for pk, report, digest in made:
        checkpoint = Checkpoint.objects.with_refs().with_report().get(pk=pk)
        assert checkpoint.compaction_report == report
        assert checkpoint.hash == digest == document_hash(checkpoint.state_refs, checkpoint.agent_state_refs)
    migrated = Checkpoint.objects.filter(mission_id=mission.pk).order_by("seq")
    assert [row.report_id for row in migrated][0] == [row.report_id for row in migrated][1]
    assert len({row.report_id for row in migrated if row.report_id}) == 2
    assert [row.report_id for row in migrated][3] is None
