"""The maps live only in `checkpoints_refmap` now (0009 moved them): the row's copies go, and every
checkpoint names its maps. (A migration of its own: PostgreSQL alters a table only once the
previous migration's updates are committed.)"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("checkpoints", "0009_shared_reference_maps"),
    ]

    operations = [
        migrations.RemoveField(model_name="checkpoint", name="state_refs"),
        migrations.RemoveField(model_name="checkpoint", name="agent_state_refs"),
        migrations.AlterField(
            model_name="checkpoint",
            name="state_map",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="checkpoints.refmap",
            ),
        ),
        migrations.AlterField(
            model_name="checkpoint",
            name="agent_map",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="checkpoints.refmap",
            ),
        ),
    ]
