"""The checkpoint tables join the `quests` app (docs/architecture.md, "One app for the tables"), in
the state only: each model keeps its table (`db_table` = its old name), its indexes, constraints
and sequences, so nothing in the database changes. The models are created in `quests`' state and
the foreign keys of `quests`' own models re-pointed to them; checkpoints 0014 then deletes them
from `checkpoints`' state and moves their content types."""

import checkpoints.refmap_models
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("quests", "0009_standing_decisions_and_graph_questions"),
        # The tables as checkpoints' last migration leaves them: the state created here copies them.
        ("checkpoints", "0010_checkpoint_refs_only_in_maps"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            # The tables stay as they are (each model names its db_table): only the state moves.
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name='Blob',
                    fields=[
                        ('retention_class', models.CharField(choices=[('working', 'Working state'), ('long_term', 'Long-term memory')], default='working', max_length=16)),
                        ('retention_approved_at', models.DateTimeField(blank=True, null=True)),
                        ('sha256', models.CharField(max_length=64, primary_key=True, serialize=False)),
                        ('data', models.BinaryField()),
                        ('size_bytes', models.PositiveIntegerField()),
                        ('media_type', models.CharField(default='application/json', max_length=64)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('expires_at', models.DateTimeField(blank=True, null=True)),
                    ],
                    options={
                        'db_table': 'checkpoints_blob',
                    },
                ),
                migrations.CreateModel(
                    name='RefMap',
                    fields=[
                        ('sha256', models.CharField(max_length=64, primary_key=True, serialize=False)),
                        ('refs', models.JSONField()),
                    ],
                    options={
                        'db_table': 'checkpoints_refmap',
                    },
                ),
                migrations.CreateModel(
                    name='Checkpoint',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                        ('retention_class', models.CharField(choices=[('working', 'Working state'), ('long_term', 'Long-term memory')], default='working', max_length=16)),
                        ('retention_approved_at', models.DateTimeField(blank=True, null=True)),
                        ('expires_at', models.DateTimeField(blank=True, db_index=True, null=True)),
                        ('seq', models.PositiveIntegerField()),
                        ('trigger', models.CharField(choices=[('agent', 'Agent'), ('background', 'Background'), ('approval', 'Approval'), ('milestone', 'Milestone'), ('stop', 'Stop'), ('restore', 'Restore')], max_length=16)),
                        ('hash', models.CharField(max_length=64)),
                        ('verified', models.BooleanField(default=False)),
                        ('verified_at', models.DateTimeField(blank=True, null=True)),
                        ('note', models.TextField(blank=True, default='')),
                        ('agent_delta', models.JSONField(blank=True, default=dict)),
                        ('record_watermark', models.BigIntegerField(default=0)),
                        ('size_bytes', models.PositiveIntegerField(default=0)),
                        ('agent_state_bytes', models.PositiveIntegerField(default=0)),
                        ('new_bytes', models.PositiveIntegerField(default=0)),
                        ('compaction_report', models.JSONField(blank=True, default=dict)),
                        ('mission', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='checkpoints', to='quests.mission')),
                        ('parent', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='children', to='quests.checkpoint')),
                        ('run', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='quests.run')),
                        ('agent_map', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='quests.refmap')),
                        ('state_map', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='quests.refmap')),
                    ],
                    options={
                        'db_table': 'checkpoints_checkpoint',
                        'ordering': ['-seq'],
                    },
                    bases=(checkpoints.refmap_models.SharedRefs, models.Model),
                ),
                migrations.AlterField(
                    model_name='approval',
                    name='checkpoint',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='quests.checkpoint'),
                ),
                migrations.AlterField(
                    model_name='milestone',
                    name='checkpoint',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='quests.checkpoint'),
                ),
                migrations.AlterField(
                    model_name='mission',
                    name='head_checkpoint',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='quests.checkpoint'),
                ),
                migrations.AlterField(
                    model_name='mission',
                    name='last_verified_checkpoint',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='quests.checkpoint'),
                ),
                migrations.CreateModel(
                    name='Operation',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                        ('retention_class', models.CharField(choices=[('working', 'Working state'), ('long_term', 'Long-term memory')], default='working', max_length=16)),
                        ('retention_approved_at', models.DateTimeField(blank=True, null=True)),
                        ('expires_at', models.DateTimeField(blank=True, db_index=True, null=True)),
                        ('key', models.CharField(max_length=200)),
                        ('request_hash', models.CharField(max_length=64)),
                        ('kind', models.CharField(max_length=100)),
                        ('target', models.CharField(max_length=500)),
                        ('request', models.JSONField(default=dict)),
                        ('status', models.CharField(choices=[('planned', 'Planned'), ('attempted', 'Attempted'), ('completed', 'Completed'), ('failed', 'Failed')], default='planned', max_length=16)),
                        ('attempts', models.PositiveIntegerField(default=0)),
                        ('max_attempts', models.PositiveIntegerField(default=3)),
                        ('external_id', models.CharField(blank=True, default='', max_length=500)),
                        ('external_status', models.CharField(blank=True, default='', max_length=100)),
                        ('receipt', models.JSONField(blank=True, null=True)),
                        ('completion_hash', models.CharField(blank=True, default='', max_length=64)),
                        ('error', models.TextField(blank=True, default='')),
                        ('retryable', models.BooleanField(blank=True, null=True)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('mission', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='operations', to='quests.mission')),
                        ('run', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='quests.run')),
                    ],
                    options={
                        'db_table': 'checkpoints_operation',
                        'ordering': ['id'],
                    },
                ),
                migrations.CreateModel(
                    name='OperationEvent',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                        ('retention_class', models.CharField(choices=[('working', 'Working state'), ('long_term', 'Long-term memory')], default='working', max_length=16)),
                        ('retention_approved_at', models.DateTimeField(blank=True, null=True)),
                        ('expires_at', models.DateTimeField(blank=True, db_index=True, null=True)),
                        ('event', models.CharField(max_length=16)),
                        ('external_status', models.CharField(blank=True, default='', max_length=100)),
                        ('receipt', models.JSONField(blank=True, null=True)),
                        ('error', models.TextField(blank=True, default='')),
                        ('operation', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='events', to='quests.operation')),
                    ],
                    options={
                        'db_table': 'checkpoints_operationevent',
                        'ordering': ['id'],
                    },
                ),
                migrations.CreateModel(
                    name='Record',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                        ('retention_class', models.CharField(choices=[('working', 'Working state'), ('long_term', 'Long-term memory')], default='working', max_length=16)),
                        ('retention_approved_at', models.DateTimeField(blank=True, null=True)),
                        ('expires_at', models.DateTimeField(blank=True, db_index=True, null=True)),
                        ('kind', models.CharField(choices=[('decision', 'Decision'), ('open_question', 'Open Question'), ('blocker', 'Blocker'), ('dependency', 'Dependency'), ('evidence', 'Evidence'), ('note', 'Note'), ('tool_output', 'Tool Output')], max_length=16)),
                        ('text', models.TextField()),
                        ('data', models.JSONField(blank=True, null=True)),
                        ('size_bytes', models.PositiveIntegerField(default=0)),
                        ('resolved', models.BooleanField(default=False)),
                        ('abandoned', models.BooleanField(default=False)),
                        ('archived', models.BooleanField(default=False)),
                        ('blob', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='quests.blob')),
                        ('mission', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='records', to='quests.mission')),
                        ('resolved_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='quests.record')),
                        ('run', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='quests.run')),
                    ],
                    options={
                        'db_table': 'checkpoints_record',
                        'ordering': ['id'],
                    },
                ),
                migrations.CreateModel(
                    name='RetentionPolicy',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('grace_days', models.PositiveIntegerField(default=30, help_text='Days working state is kept after its mission ends.')),
                        ('approved_max_days', models.PositiveIntegerField(default=365, help_text="Days a quest's history is kept when its owner chose to keep it.")),
                        ('memory_max_days', models.PositiveIntegerField(default=365, help_text='Days a memory item lives before renewal.')),
                        ('snapshot_prune_days', models.PositiveIntegerField(default=7, help_text='Background snapshots older than this are pruned.')),
                        ('snapshot_keep_newest', models.PositiveIntegerField(default=20, help_text='Background snapshots always kept per mission.')),
                        ('purge_batch_size', models.PositiveIntegerField(default=200)),
                        ('updated_at', models.DateTimeField(auto_now_add=True, verbose_name='in force from')),
                        ('updated_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='set by')),
                    ],
                    options={
                        'verbose_name_plural': 'retention policies',
                        'db_table': 'checkpoints_retentionpolicy',
                        'ordering': ['-id'],
                        'get_latest_by': 'id',
                    },
                ),
                migrations.CreateModel(
                    name='PurgeLog',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('policy_snapshot', models.JSONField(default=dict)),
                        ('as_of', models.DateTimeField()),
                        ('dry_run', models.BooleanField(default=False)),
                        ('counts', models.JSONField(default=dict)),
                        ('trigger', models.CharField(default='schedule', max_length=32)),
                        ('actor', models.CharField(blank=True, default='', max_length=150)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('error', models.TextField(blank=True, default='')),
                        ('policy', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='quests.retentionpolicy')),
                    ],
                    options={
                        'db_table': 'checkpoints_purgelog',
                        'ordering': ['-id'],
                    },
                ),
                migrations.CreateModel(
                    name='SnapshotRequest',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('status', models.CharField(choices=[('pending', 'Pending'), ('claimed', 'Claimed'), ('done', 'Done')], default='pending', max_length=16)),
                        ('requested_at', models.DateTimeField(auto_now_add=True)),
                        ('not_before', models.DateTimeField()),
                        ('claimed_at', models.DateTimeField(blank=True, null=True)),
                        ('claim_token', models.CharField(blank=True, default='', max_length=64)),
                        ('attempts', models.PositiveIntegerField(default=0)),
                        ('enqueued_at', models.DateTimeField(blank=True, null=True)),
                        ('completed_at', models.DateTimeField(blank=True, null=True)),
                        ('outcome', models.CharField(blank=True, default='', max_length=32)),
                        ('checkpoint', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='quests.checkpoint')),
                        ('mission', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='snapshot_requests', to='quests.mission')),
                    ],
                    options={
                        'db_table': 'checkpoints_snapshotrequest',
                    },
                ),
                migrations.CreateModel(
                    name='GraphCheckpoint',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('retention_class', models.CharField(choices=[('working', 'Working state'), ('long_term', 'Long-term memory')], default='working', max_length=16)),
                        ('retention_approved_at', models.DateTimeField(blank=True, null=True)),
                        ('ns', models.CharField(blank=True, default='', max_length=500)),
                        ('graph_id', models.CharField(max_length=100)),
                        ('parent_graph_id', models.CharField(blank=True, default='', max_length=100)),
                        ('skeleton', models.JSONField(default=dict)),
                        ('metadata', models.JSONField(default=dict)),
                        ('channels', models.JSONField(default=dict)),
                        ('run_ref', models.CharField(blank=True, db_index=True, default='', max_length=100)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('expires_at', models.DateTimeField(blank=True, null=True)),
                        ('checkpoint', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='graph', to='quests.checkpoint')),
                        ('mission', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='quests.mission')),
                    ],
                    options={
                        'db_table': 'checkpoints_graphcheckpoint',
                        'constraints': [models.UniqueConstraint(fields=('mission', 'ns', 'graph_id'), name='graph_checkpoint_unique_per_thread')],
                    },
                ),
                migrations.CreateModel(
                    name='GraphWrite',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('retention_class', models.CharField(choices=[('working', 'Working state'), ('long_term', 'Long-term memory')], default='working', max_length=16)),
                        ('retention_approved_at', models.DateTimeField(blank=True, null=True)),
                        ('ns', models.CharField(blank=True, default='', max_length=500)),
                        ('graph_id', models.CharField(max_length=100)),
                        ('task_id', models.CharField(max_length=100)),
                        ('task_path', models.CharField(blank=True, default='', max_length=500)),
                        ('idx', models.IntegerField()),
                        ('channel', models.CharField(max_length=500)),
                        ('value', models.JSONField(default=dict)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('expires_at', models.DateTimeField(blank=True, null=True)),
                        ('mission', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='quests.mission')),
                    ],
                    options={
                        'db_table': 'checkpoints_graphwrite',
                        'ordering': ['task_path', 'task_id', 'idx'],
                        'constraints': [models.UniqueConstraint(fields=('mission', 'ns', 'graph_id', 'task_id', 'idx'), name='graph_write_unique_per_task')],
                    },
                ),
                migrations.AddConstraint(
                    model_name='operation',
                    constraint=models.UniqueConstraint(fields=('mission', 'key'), name='operation_key_unique_per_mission'),
                ),
                migrations.AddIndex(
                    model_name='record',
                    index=models.Index(condition=models.Q(('abandoned', False), ('resolved', False)), fields=['mission', 'kind', 'id'], name='record_live_by_kind'),
                ),
                migrations.AddIndex(
                    model_name='checkpoint',
                    index=models.Index(condition=models.Q(('trigger', 'restore'), ('parent__isnull', True), ('verified', True), _connector='OR'), fields=['mission', 'seq'], name='checkpoint_branch_points'),
                ),
                migrations.AddIndex(
                    model_name='checkpoint',
                    index=models.Index(condition=models.Q(('trigger', 'background'), ('verified', False)), fields=['created_at', 'mission'], name='checkpoint_prunable'),
                ),
                migrations.AddConstraint(
                    model_name='checkpoint',
                    constraint=models.UniqueConstraint(fields=('mission', 'seq'), name='checkpoint_seq_unique_per_mission'),
                ),
                migrations.AddIndex(
                    model_name='snapshotrequest',
                    index=models.Index(fields=['status', 'not_before'], name='snapshot_request_due'),
                ),
                migrations.AddIndex(
                    model_name='snapshotrequest',
                    index=models.Index(fields=['mission', '-id'], name='snapshot_request_latest'),
                ),
                migrations.AddConstraint(
                    model_name='snapshotrequest',
                    constraint=models.UniqueConstraint(condition=models.Q(('status', 'pending')), fields=('mission',), name='one_pending_snapshot_request_per_mission'),
                ),
            ],
        ),
    ]
