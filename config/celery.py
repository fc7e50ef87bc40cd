import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("questlog")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Celery's Django fixup closes every database connection before and after each task unless it is
# told to reuse them; then it closes them only every this many tasks. Reusing them saves opening a
# PostgreSQL connection per task; the handler below keeps Django's own rules (CONN_MAX_AGE, health
# checks) around every task, as Django does around every request. Workers never use a psycopg
# pool (config/database.py), and each forked child still drops the connections of its parent
# (the fixup's worker_process_init handler).
app.add_defaults({"CELERY_DB_REUSE_MAX": 1000})  # type: ignore[arg-type]  # celery takes a mapping too; the stubs list only a callable
app.autodiscover_tasks()
app.autodiscover_tasks(["quests.retention"])


@signals.task_prerun.connect
@signals.task_postrun.connect
def connections_around_task(sender=None, **kwargs) -> None:
    # A task applied eagerly runs inside its caller (a request, a test), perhaps in a transaction:
    # its connection is the caller's to manage.
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()
