"""An operation's change reads the ledger chunk holding it: the mission's operations within a range
of ids. Indexed on the mission alone, that read visited every operation of the mission, so a receipt
cost more with every operation in the ledger; on (mission, id) it visits only the chunk. The index
serves every lookup by mission alone too, so it replaces the foreign key's own."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("quests", "0010_checkpoints_tables_join_quests"),
        ("checkpoints", "0014_tables_move_to_quests"),
    ]

    operations = [
        migrations.AlterField(
            model_name="operation",
            name="mission",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="operations",
                to="quests.mission",
            ),
        ),
        migrations.AddIndex(
            model_name="operation",
            index=models.Index(fields=["mission", "id"], name="operation_by_mission_and_id"),
        ),
    ]
