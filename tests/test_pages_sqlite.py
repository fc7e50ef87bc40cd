"""The pages at scale work on the embedded SQLite default as on PostgreSQL (issue 13): the board's
paging, search and counts, the inbox's union, the tokens picker, the mission page's windows (its
history, ledger and milestones), the ledger page and the checkpoint page's comparisons each run
their own view tests again, on a throwaway SQLite database, in a pytest of their own (the suite's
database is PostgreSQL)."""

import os
import subprocess
import sys

import pytest

from tests.test_serve import ROOT

pytestmark = pytest.mark.long

PAGE_TESTS = [
    "tests/test_views_board.py",
    "tests/test_views_inbox.py",
    "tests/test_views_tokens.py",
    "tests/test_views_mission_history.py",
    "tests/test_views_ledger.py",
    "tests/test_views_milestones.py",
    "tests/test_views_checkpoint.py",
]


def test_the_page_view_tests_pass_on_sqlite(tmp_path):
    environment = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT")}
    # Nothing is published to the suite's Redis: snapshot requests go nowhere.
    environment.update(QUESTLOG_DATA_DIR=str(tmp_path), CELERY_BROKER_URL="memory://localhost/")
    check = "import django; django.setup(); from django.db import connection; print(connection.vendor)"
    vendor = subprocess.run(
        [sys.executable, "-c", check],
        cwd=ROOT,
        env={**environment, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[-1]
    assert vendor == "sqlite"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", *PAGE_TESTS],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout
