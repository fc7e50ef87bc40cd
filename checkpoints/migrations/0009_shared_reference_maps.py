"""Reference maps stored once (`checkpoints.refmaps`): every checkpoint's two maps move out of its
row into `checkpoints_refmap`, the agent state's as a base and a delta laid out as the engine lays
out new checkpoints (each mission's checkpoints in order, a delta on the parent's base). A
checkpoint's hash is taken over the resolved maps, which are the maps it held: it stays valid."""

import django.db.models.deletion
from django.db import migrations, models

from checkpoints import refmaps

BATCH = 1000


def maps_out_of_rows(apps, schema_editor):
    Checkpoint = apps.get_model("checkpoints", "Checkpoint")
    RefMap = apps.get_model("checkpoints", "RefMap")
    ids = list(Checkpoint.objects.order_by("mission_id", "seq").values_list("pk", flat=True))
    layouts: dict[int, refmaps.AgentLayout] = {}
    mission = None
    for i in range(0, len(ids), BATCH):
        rows = Checkpoint.objects.filter(pk__in=ids[i : i + BATCH]).order_by("mission_id", "seq")
        maps: dict[str, dict[str, str]] = {}
        changed = []
        for row in rows.only("pk", "mission_id", "parent_id", "state_refs", "agent_state_refs"):
            if row.mission_id != mission:
                mission, layouts = row.mission_id, {}
            state = dict(row.state_refs or {})
            row.state_map_id = refmaps.map_sha(state)
            maps[row.state_map_id] = state
            layout = refmaps.agent_layout(row.agent_state_refs or {}, layouts.get(row.parent_id))
            layouts[row.pk] = layout
            maps.update(layout.new_maps)
            row.agent_map_id, row.agent_delta = layout.base, layout.delta
            changed.append(row)
        RefMap.objects.bulk_create([RefMap(sha256=sha, refs=refs) for sha, refs in maps.items()], ignore_conflicts=True)
        Checkpoint.objects.bulk_update(changed, ["state_map", "agent_map", "agent_delta"])


def maps_into_rows(apps, schema_editor):
    Checkpoint = apps.get_model("checkpoints", "Checkpoint")
    ids = list(Checkpoint.objects.values_list("pk", flat=True))
    for i in range(0, len(ids), BATCH):
        changed = []
        for row in Checkpoint.objects.filter(pk__in=ids[i : i + BATCH]).select_related("state_map", "agent_map"):
            row.state_refs = dict(row.state_map.refs)
            row.agent_state_refs = refmaps.resolved(row.agent_map.refs, row.agent_delta)
            changed.append(row)
        Checkpoint.objects.bulk_update(changed, ["state_refs", "agent_state_refs"])


class Migration(migrations.Migration):
    dependencies = [
        ("checkpoints", "0008_checkpoint_branch_points"),
    ]

    operations = [
        migrations.CreateModel(
            name="RefMap",
            fields=[
                ("sha256", models.CharField(max_length=64, primary_key=True, serialize=False)),
                ("refs", models.JSONField()),
            ],
        ),
        migrations.AddField(
            model_name="checkpoint",
            name="state_map",
            field=models.ForeignKey(
                null=True,
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="checkpoints.refmap",
            ),
        ),
        migrations.AddField(
            model_name="checkpoint",
            name="agent_map",
            field=models.ForeignKey(
                null=True,
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="checkpoints.refmap",
            ),
        ),
        migrations.AddField(
            model_name="checkpoint",
            name="agent_delta",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(maps_out_of_rows, maps_into_rows),
    ]
