"""The pages at real scale (issue 13). What waits for a person carries its mission's owner
(quests.models.waiting.WaitsForAPerson), and the inbox reads it along partial indexes of what still waits,
per person, oldest first; the board reads a person's quests along indexes in its own order and
counts them per status from an index alone."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

COPY_OWNER = "UPDATE {table} SET owner_id = (SELECT owner_id FROM quests_mission WHERE quests_mission.id = {table}.mission_id)"


def owner_field(null: bool) -> models.ForeignKey:
    return models.ForeignKey(
        editable=False, null=null, on_delete=django.db.models.deletion.CASCADE, related_name="+", to=settings.AUTH_USER_MODEL,
    )


class Migration(migrations.Migration):

    dependencies = [
        ("checkpoints", "0007_langgraph"),
        ("quests", "0005_langgraph"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(model_name="approval", name="owner", field=owner_field(null=True)),
        migrations.AddField(model_name="milestone", name="owner", field=owner_field(null=True)),
        migrations.RunSQL(COPY_OWNER.format(table="quests_approval"), migrations.RunSQL.noop),
        migrations.RunSQL(COPY_OWNER.format(table="quests_milestone"), migrations.RunSQL.noop),
        migrations.AlterField(model_name="approval", name="owner", field=owner_field(null=False)),
        migrations.AlterField(model_name="milestone", name="owner", field=owner_field(null=False)),
        migrations.AddIndex(
            model_name="approval",
            index=models.Index(condition=models.Q(("status", "pending")), fields=["owner", "created_at"], name="approval_pending_oldest"),
        ),
        migrations.AddIndex(
            model_name="milestone",
            index=models.Index(
                condition=models.Q(("review_status", "pending_review"), ("withdrawn", False)), fields=["owner", "created_at"],
                name="milestone_awaiting_oldest",
            ),
        ),
        migrations.AddIndex(
            model_name="mission",
            index=models.Index(fields=["owner", "-updated_at", "-id"], name="mission_owner_active"),
        ),
        migrations.AddIndex(
            model_name="mission",
            index=models.Index(fields=["owner", "status"], include=["updated_at"], name="mission_owner_status"),
        ),
    ]
