"""Every checkpoint's compaction report moves out of its row into a shared map (0012), then the
column goes. The report is not part of a checkpoint's hash, so every hash stays valid. The move
commits before the column is dropped: PostgreSQL alters a table only once the updates to it are
committed (the migration is not atomic; the move is)."""

from django.db import migrations

from checkpoints import refmaps

BATCH = 1000


def reports_out_of_rows(apps, schema_editor):
    Checkpoint = apps.get_model("quests", "Checkpoint")
    RefMap = apps.get_model("quests", "RefMap")
    ids = list(Checkpoint.objects.order_by("pk").values_list("pk", flat=True))
    for i in range(0, len(ids), BATCH):
        maps: dict[str, dict] = {}
        changed = []
        for row in Checkpoint.objects.filter(pk__in=ids[i : i + BATCH]).only("pk", "compaction_report"):
            report = dict(row.compaction_report or {})
            row.report_id = refmaps.map_sha(report) if report else None
            if report:
                maps[row.report_id] = report
            changed.append(row)
        RefMap.objects.bulk_create([RefMap(sha256=sha, refs=report) for sha, report in maps.items()], ignore_conflicts=True)
        Checkpoint.objects.bulk_update(changed, ["report"])


def reports_into_rows(apps, schema_editor):
    Checkpoint = apps.get_model("quests", "Checkpoint")
    ids = list(Checkpoint.objects.filter(report__isnull=False).values_list("pk", flat=True))
    for i in range(0, len(ids), BATCH):
        changed = []
        for row in Checkpoint.objects.filter(pk__in=ids[i : i + BATCH]).select_related("report"):
            row.compaction_report = dict(row.report.refs)
            changed.append(row)
        Checkpoint.objects.bulk_update(changed, ["compaction_report"])


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("quests", "0012_compaction_reports_shared"),
    ]

    operations = [
        migrations.RunPython(reports_out_of_rows, reports_into_rows, atomic=True),
        migrations.RemoveField(model_name="checkpoint", name="compaction_report"),
    ]
