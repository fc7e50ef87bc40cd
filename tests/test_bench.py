"""The issue 10 benchmarks run end to end in quick mode (a smoke test: the figures themselves are
measured by `make bench`, not asserted here)."""

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

pytestmark = pytest.mark.long

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def bench_env(worker_id):
    """A benchmark database of this test's own beside the test database, dropped afterwards."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    name = f"{parts.path.lstrip('/')}_bench_smoke_{worker_id}"
    env = {
        **os.environ,
        "BENCH_QUICK": "1",
        "BENCH_DATABASE_URL": urlunsplit(parts._replace(path=f"/{name}")),
        # The benchmarks' own processes publish snapshot requests nowhere rather than to the suite's Redis.
        "CELERY_BROKER_URL": "memory://localhost/",
    }
    yield env
    with psycopg.connect(urlunsplit(parts._replace(scheme="postgresql", path="/postgres")), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


def run(script: str, env: dict[str, str], *args: str) -> str:
    result = subprocess.run([sys.executable, f"bench/{script}", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_bench_vs_langgraph_prints_every_path_and_goal(bench_env):
    out = run("bench_vs_langgraph.py", bench_env)
    for figure in (
        "PostgresSaver put:",
        "Questlog's ORM writer for tools and tests",
        "ms of the agent's own CPU work (paced):",
        "in-process API checkpoint vs paced put (speed",
        "Questlog service checkpoint",
        "PostgresSaver get_tuple, 10 checkpoints:",
        "Questlog resume_bundle, 10 checkpoints:",
        "Questlog resume_bundle, 100 checkpoints:",
        "POST /api/v1/runs/{id}/checkpoints:",
        "the same POST through a bare httpx.Client:",
        "bytes per checkpoint",
        "Questlog / PostgresSaver:",
        "QuestlogSaver put (POST /api/v1/langgraph/checkpoints):",
        "QuestlogSaver get_tuple, 10 checkpoints:",
        "QuestlogSaver get_tuple, 100 checkpoints:",
        "get_tuple growth 10 → 100: QuestlogSaver:",
        "operation complete, 10 operations in the ledger:",
        "operation complete, 100 operations in the ledger:",
        "operation complete, 300 operations in the ledger:",
        "agent checkpoint (service), 300 operations in the ledger:",
    ):
        assert figure in out, figure
    goals, issue_20 = out.split("Goals of issues 10 and 11")[1].split("Goals of issue 20")
    assert goals.count("PASS") + goals.count("MISS") == 7, goals
    # The ledger's receipt (bench/ledger.py), at two lengths, is two of issue 20's goals.
    assert issue_20.count("PASS") + issue_20.count("MISS") == 8, issue_20
    assert "operation complete p50, 100 vs 10 operations in the ledger" in issue_20, issue_20
    assert "operation complete p50, 300 vs 10 operations in the ledger" in issue_20, issue_20


def test_load_prints_rates_latencies_and_no_failures(bench_env):
    out = run("load.py", bench_env)
    for figure in (
        "requests/s:",
        "checkpoints/s:",
        "the busiest agent's requests/s:",
        "checkpoint ",
        "heartbeat ",
        "operation complete",
        "p99",
        "page: inbox",
        "approvals decided by the person:",
    ):
        assert figure in out, figure
    # A non-2xx answer would mean the benchmark calls the API wrongly (or the API broke).
    assert "non-2xx answers: 0" in out, out


def test_load_with_a_hostile_agent_prints_both_phases_and_their_ratio(bench_env):
    out = run("load.py", bench_env, "--hostile", "--hostile-threads", "2")
    for figure in (
        "others alone:",
        "others with the hostile agent:",
        "hostile: mission",
        "hostile: checkpoint",
        "hostile: approvals",
        "hostile: receipt",
        "ratio",
    ):
        assert figure in out, figure
    # The hostile agent's requests are all within the bounds, and the others are never refused.
    assert "hostile non-2xx answers: 0" in out, out
    assert out.count("non-2xx 0") == 2, out


def test_bench_pages_prints_every_page_and_goal(bench_env):
    out = run("bench_pages.py", bench_env)
    for page in ("/", "/approvals/", "mission page", "checkpoint page"):
        for figure in ("time", "HTML", "queries"):
            assert f"\n{page} {figure} " in out, (page, figure)
    table = out.split("Pages: 10 missions and 10 checkpoints")[1]
    assert table.count("MET") + table.count("MISSED") == 12, table
    assert "goals met" in table


def test_http_floor_prints_the_bare_apps_wall_and_the_agents_cpu(bench_env):
    out = run("http_floor.py", bench_env, "50")
    assert "12 KB checkpoint to a bare WSGI app over HTTP, 50 calls: wall p50" in out, out
    assert "agent CPU p50" in out, out
