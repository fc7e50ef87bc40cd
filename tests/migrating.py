"""Run migrations on the test database with rows present: back to a point (the models as they were
there, to make rows with), then forward to the latest migration of every app, so the database is
as every other test expects it."""

from django.apps.registry import Apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate_back(targets: list[tuple[str, str]]) -> Apps:
    """Migrate to `targets`; the models as they were there."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def migrate_forward() -> None:
    """Migrate every app to its latest migration (a fresh executor: the graph as it is on disk)."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
