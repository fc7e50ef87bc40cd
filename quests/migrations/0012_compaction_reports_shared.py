"""A checkpoint's compaction report (~800 B of JSON) is stored once as a shared map
(`checkpoints_refmap`) and named by `report_id`: most checkpoints repeat their parent's report.
0013 moves the reports of existing checkpoints and drops the column."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("quests", "0011_operations_by_mission_and_id"),
    ]

    operations = [
        migrations.AddField(
            model_name="checkpoint",
            name="report",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="quests.refmap",
            ),
        ),
    ]
