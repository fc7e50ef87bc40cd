"""The checkpoint tables join the `quests` app (docs/architecture.md, "One app for the tables"): a
state-only pair of migrations, so on a real database with rows in every table the rows, the
foreign keys between the two apps' tables and the content types (with the permissions granted on
them) come through unchanged."""

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from checkpoints.models import Blob, Checkpoint, Operation, OperationEvent, PurgeLog, Record, RefMap, RetentionPolicy, SnapshotRequest
from quests.langgraph.models import GraphCheckpoint, GraphWrite
from quests.models import Mission
from tests import migrating

BEFORE = [("quests", "0009_standing_decisions_and_graph_questions"), ("checkpoints", "0010_checkpoint_refs_only_in_maps")]
AFTER = [("quests", "0010_checkpoints_tables_join_quests"), ("checkpoints", "0014_tables_move_to_quests")]
MOVED = [Blob, RefMap, Checkpoint, Record, Operation, OperationEvent, SnapshotRequest, RetentionPolicy, PurgeLog, GraphCheckpoint, GraphWrite]


def _foreign_keys(table: str) -> set[tuple[str, str, str]]:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    return {(c["columns"][0], *c["foreign_key"]) for c in constraints.values() if c["foreign_key"]}


@pytest.mark.long
@pytest.mark.django_db(transaction=True)
def test_the_checkpoint_tables_join_quests_with_their_rows_keys_and_content_types():
    old = migrating.migrate_back(BEFORE)
    assert "checkpoint" in old.all_models["checkpoints"] and "checkpoint" not in old.all_models["quests"]
    owner = old.get_model("auth", "User").objects.create(username="before-the-move")
    mission = old.get_model("quests", "Mission").objects.create(owner=owner, title="Old", objective="o")
    run = old.get_model("quests", "Run").objects.create(mission=mission, number=1)
    blob = old.get_model("checkpoints", "Blob").objects.create(sha256="b" * 64, data=b"{}", size_bytes=2)
    refmap = old.get_model("checkpoints", "RefMap").objects.create(sha256="r" * 64, refs={"mission": "b" * 64})
    checkpoint = old.get_model("checkpoints", "Checkpoint").objects.create(
        mission=mission, run=run, seq=1, trigger="agent", hash="h" * 64, state_map_id=refmap.pk, agent_map_id=refmap.pk
    )
    mission.head_checkpoint_id = checkpoint.pk
    mission.save(update_fields=["head_checkpoint"])
    record = old.get_model("checkpoints", "Record").objects.create(mission=mission, run=run, kind="note", text="kept", blob=blob)
    operation = old.get_model("checkpoints", "Operation").objects.create(mission=mission, run=run, key="k", request_hash="q" * 64, kind="email", target="t")
    event = old.get_model("checkpoints", "OperationEvent").objects.create(operation=operation, event="attempted")
    graph = old.get_model("checkpoints", "GraphCheckpoint").objects.create(checkpoint=checkpoint, mission=mission, graph_id="g1")
    write = old.get_model("checkpoints", "GraphWrite").objects.create(mission=mission, graph_id="g1", task_id="t1", idx=0, channel="c")
    # A person allowed to look at checkpoints in the admin, by a permission on the old content type
    # (the content types' own tables are the same before and after: today's models write them).
    content_types = {model._meta.model_name: ContentType.objects.get_or_create(app_label="checkpoints", model=model._meta.model_name)[0].pk for model in MOVED}
    view_checkpoint, _ = Permission.objects.get_or_create(
        codename="view_checkpoint", content_type_id=content_types["checkpoint"], defaults={"name": "Can view checkpoint"}
    )
    staff = User.objects.create(username="staff-viewer", is_staff=True)
    staff.user_permissions.add(view_checkpoint)
    keys_before = {model._meta.db_table: _foreign_keys(model._meta.db_table) for model in [*MOVED, Mission]}

    try:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(AFTER)
        new = executor.loader.project_state(AFTER).apps
        assert not new.all_models["checkpoints"] and "checkpoint" in new.all_models["quests"]
        # Today's models read the rows below: forward through the later migrations of the tables
        # (compaction reports out of the rows, tests/test_shared_reports.py), which keep the rows.
        migrating.migrate_forward()

        assert {model._meta.db_table: _foreign_keys(model._meta.db_table) for model in [*MOVED, Mission]} == keys_before
        moved = Checkpoint.objects.with_refs().get(pk=checkpoint.pk)
        assert (moved.mission_id, moved.run_id, moved.state_refs) == (mission.pk, run.pk, {"mission": "b" * 64})
        assert Mission.objects.get(pk=mission.pk).head_checkpoint == moved
        assert Record.objects.get(pk=record.pk).blob == Blob.objects.get(pk=blob.pk)
        assert OperationEvent.objects.get(pk=event.pk).operation == Operation.objects.get(pk=operation.pk)
        assert GraphCheckpoint.objects.get(pk=graph.pk).checkpoint == moved
        assert GraphWrite.objects.get(pk=write.pk).mission_id == mission.pk

        ContentType.objects.clear_cache()
        assert not ContentType.objects.filter(app_label="checkpoints").exists()
        assert {model._meta.model_name: ContentType.objects.get_for_model(model).pk for model in MOVED} == content_types
        assert User.objects.get(pk=staff.pk).has_perm("quests.view_checkpoint")
        assert Permission.objects.get(pk=view_checkpoint.pk).content_type.app_label == "quests"
    finally:
        migrating.migrate_forward()
