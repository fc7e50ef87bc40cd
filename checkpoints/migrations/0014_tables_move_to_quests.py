"""The checkpoint tables now belong to the `quests` app (quests 0010 took them into its state; the
tables themselves do not change): they leave `checkpoints`' state here, and their content types
move to `quests`, so the permissions granted on them and the admin's history of them survive."""

from django.db import migrations


MOVED = ("blob", "refmap", "checkpoint", "record", "operation", "operationevent", "snapshotrequest", "retentionpolicy", "purgelog", "graphcheckpoint", "graphwrite")


def _relabel(apps, source: str, target: str) -> None:
    """Each content type of a moved model changes its app label, keeping its id, so every
    permission on it (and whoever was granted one) and every admin log entry naming it stays.
    When the target label has one already (a `migrate` between a rollback and this, whose
    post_migrate made it), the two are merged into the source's: grants and log entries move to
    it, then the newer one goes."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    LogEntry = apps.get_model("admin", "LogEntry")
    for model in MOVED:
        moving = ContentType.objects.filter(app_label=source, model=model).first()
        if moving is None:
            continue
        there = ContentType.objects.filter(app_label=target, model=model).first()
        if there is not None:
            for permission in Permission.objects.filter(content_type=there):
                kept = Permission.objects.filter(content_type=moving, codename=permission.codename).first()
                if kept is None:
                    Permission.objects.filter(pk=permission.pk).update(content_type=moving)
                    continue
                kept.group_set.add(*permission.group_set.all())
                kept.user_set.add(*permission.user_set.all())
                permission.delete()
            LogEntry.objects.filter(content_type=there).update(content_type=moving)
            there.delete()
        ContentType.objects.filter(pk=moving.pk).update(app_label=target)
    ContentType.objects.clear_cache()


def content_types_to_quests(apps, schema_editor):
    _relabel(apps, "checkpoints", "quests")


def content_types_to_checkpoints(apps, schema_editor):
    _relabel(apps, "quests", "checkpoints")


class Migration(migrations.Migration):

    dependencies = [
        ("checkpoints", "0010_checkpoint_refs_only_in_maps"),
        ("quests", "0010_checkpoints_tables_join_quests"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("admin", "0003_logentry_add_action_flag_choices"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            # The tables stay as they are (each model names its db_table): only the state moves.
            database_operations=[],
            state_operations=[
                migrations.RemoveIndex(
                    model_name='checkpoint',
                    name='checkpoint_prunable',
                ),
                migrations.RemoveIndex(
                    model_name='checkpoint',
                    name='checkpoint_branch_points',
                ),
                migrations.RemoveConstraint(
                    model_name='checkpoint',
                    name='checkpoint_seq_unique_per_mission',
                ),
                migrations.RemoveConstraint(
                    model_name='graphcheckpoint',
                    name='graph_checkpoint_unique_per_thread',
                ),
                migrations.RemoveConstraint(
                    model_name='graphwrite',
                    name='graph_write_unique_per_task',
                ),
                migrations.RemoveConstraint(
                    model_name='operation',
                    name='operation_key_unique_per_mission',
                ),
                migrations.RemoveField(
                    model_name='operationevent',
                    name='operation',
                ),
                migrations.RemoveField(
                    model_name='purgelog',
                    name='policy',
                ),
                migrations.RemoveIndex(
                    model_name='record',
                    name='record_live_by_kind',
                ),
                migrations.RemoveField(
                    model_name='retentionpolicy',
                    name='updated_by',
                ),
                migrations.RemoveIndex(
                    model_name='snapshotrequest',
                    name='snapshot_request_due',
                ),
                migrations.RemoveIndex(
                    model_name='snapshotrequest',
                    name='snapshot_request_latest',
                ),
                migrations.RemoveConstraint(
                    model_name='snapshotrequest',
                    name='one_pending_snapshot_request_per_mission',
                ),
                migrations.RemoveField(
                    model_name='checkpoint',
                    name='agent_map',
                ),
                migrations.RemoveField(
                    model_name='checkpoint',
                    name='mission',
                ),
                migrations.RemoveField(
                    model_name='checkpoint',
                    name='parent',
                ),
                migrations.RemoveField(
                    model_name='checkpoint',
                    name='run',
                ),
                migrations.RemoveField(
                    model_name='checkpoint',
                    name='state_map',
                ),
                migrations.RemoveField(
                    model_name='graphcheckpoint',
                    name='checkpoint',
                ),
                migrations.RemoveField(
                    model_name='graphcheckpoint',
                    name='mission',
                ),
                migrations.RemoveField(
                    model_name='graphwrite',
                    name='mission',
                ),
                migrations.RemoveField(
                    model_name='operation',
                    name='mission',
                ),
                migrations.RemoveField(
                    model_name='operation',
                    name='run',
                ),
                migrations.DeleteModel(
                    name='OperationEvent',
                ),
                migrations.DeleteModel(
                    name='PurgeLog',
                ),
                migrations.RemoveField(
                    model_name='record',
                    name='blob',
                ),
                migrations.RemoveField(
                    model_name='record',
                    name='mission',
                ),
                migrations.RemoveField(
                    model_name='record',
                    name='resolved_by',
                ),
                migrations.RemoveField(
                    model_name='record',
                    name='run',
                ),
                migrations.DeleteModel(
                    name='RetentionPolicy',
                ),
                migrations.RemoveField(
                    model_name='snapshotrequest',
                    name='checkpoint',
                ),
                migrations.RemoveField(
                    model_name='snapshotrequest',
                    name='mission',
                ),
                migrations.DeleteModel(
                    name='RefMap',
                ),
                migrations.DeleteModel(
                    name='GraphCheckpoint',
                ),
                migrations.DeleteModel(
                    name='GraphWrite',
                ),
                migrations.DeleteModel(
                    name='Operation',
                ),
                migrations.DeleteModel(
                    name='Blob',
                ),
                migrations.DeleteModel(
                    name='Record',
                ),
                migrations.DeleteModel(
                    name='Checkpoint',
                ),
                migrations.DeleteModel(
                    name='SnapshotRequest',
                ),
            ],
        ),
        migrations.RunPython(content_types_to_quests, content_types_to_checkpoints),
    ]
