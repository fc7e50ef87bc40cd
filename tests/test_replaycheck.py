"""replaycheck: the demo agent is SIGKILLed right after every step and resumes without repeating a
side effect or forgetting anything; an agent that ignores its stored receipts is caught.

This module is imported by the agent subprocesses too (`careless_agent`), so it imports nothing
that needs Django set up at module level."""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from django.core.management import CommandError, call_command

from questlog_client import Questlog
from questlog_client.fake_service import FakeService
from questlog_client.testing import Scenario, replaycheck

pytestmark = pytest.mark.long

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ("repeated", "constraints", "forgotten", "state_diffs", "errors")


def careless_agent(ql: Questlog, mission_id: int, service: FakeService) -> None:
    """Deliberately broken: it sends the email first and only then asks its ledger, so the stored
    receipt of an earlier run never stops it from sending again."""
    mission = ql.missions.get(mission_id)
    if mission.resume().next_action == "none":
        return
    invite = {"to": "team@example.com", "subject": "Offsite in May"}
    with mission.start_run(agent="careless") as run:
        outcome = service.call("email.send", invite["to"], invite, status="sent")
        run.operation("send", kind="email.send", target=invite["to"], request=invite)(lambda op: outcome)
        run.record("decision", "The invitation is out.", key="sent")
        run.stop("completed", "Invitation sent.")


def replaycheck_command(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "replaycheck", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def table(stdout: str) -> tuple[dict[int, dict[str, int]], dict[str, int]]:
    """The rows (by crash point) and the total line of replaycheck's table."""
    rows, total = {}, {}
    for line in stdout.splitlines():
        row = re.match(r"^\s*(\d+)\s+.*?\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+$", line)
        if row:
            rows[int(row[1])] = dict(zip(COLUMNS, map(int, row.groups()[1:])))
        found = re.match(r"^\s*total\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+$", line)
        if found:
            total = dict(zip(COLUMNS, map(int, found.groups())))
    return rows, total


def test_the_demo_agent_resumes_cleanly_after_a_crash_at_every_step(tmp_path):
    # Under `make test` DATABASE_URL names PostgreSQL: the command makes and drops its own database.
    env = {**os.environ, "QUESTLOG_DATA_DIR": str(tmp_path)}
    result = replaycheck_command("--scenario", "demo", "--points", "all", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    steps = int(re.search(r"(\d+) steps and (\d+) side effects uninterrupted", result.stdout)[1])
    rows, total = table(result.stdout)
    assert sorted(rows) == list(range(1, steps + 1)), result.stdout
    assert all(row == dict.fromkeys(COLUMNS, 0) for row in rows.values()), result.stdout
    assert total == dict.fromkeys(COLUMNS, 0)
    assert "OK: every count is zero." in result.stdout
    assert "crash points" in result.stderr  # the progress bar
    if "postgres" in os.environ.get("DATABASE_URL", ""):
        name = re.search(r"Throwaway database: PostgreSQL database (\S+?);", result.stderr)[1]
        assert not database_exists(name), f"{name} was not dropped"


def database_exists(name: str) -> bool:
    import psycopg

    url = urlsplit(os.environ["DATABASE_URL"])._replace(path="/postgres").geturl()
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is not None


def test_a_terminated_check_stops_its_servers_and_removes_its_throwaway_files(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["QUESTLOG_DATA_DIR"] = str(tmp_path)
    check = subprocess.Popen([sys.executable, "manage.py", "replaycheck"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in check.stderr:
        lines.append(line)
        if line.startswith("Throwaway servers on"):
            break
    urls = re.findall(r"http://127\.0\.0\.1:\d+", lines[-1])
    data_dir = re.search(r"SQLite file in (\S+)", "".join(lines))[1].rstrip(";")
    assert Path(data_dir).exists() and urls
    check.send_signal(signal.SIGTERM)
    assert check.wait(timeout=60) == 143
    assert not Path(data_dir).exists()
    for url in urls:
        with pytest.raises(httpx.TransportError):
            httpx.get(url, timeout=2)


def test_an_agent_that_ignores_its_stored_receipts_is_caught_with_a_non_zero_exit(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}  # the SQLite default: a temp file
    env["QUESTLOG_DATA_DIR"] = str(tmp_path)
    result = replaycheck_command("--agent", "tests.test_replaycheck:careless_agent", env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Throwaway database: SQLite file" in result.stderr
    rows, total = table(result.stdout)
    assert total["repeated"] >= 5, result.stdout
    # Crashed after its first step the careless agent has not sent anything yet: it must not be blamed there.
    assert rows[1]["repeated"] == 0 and rows[2]["repeated"] == 1, result.stdout
    assert "side effect done 2×" in result.stdout
    assert "FAILED" in result.stdout


def test_it_refuses_unclear_arguments_before_starting_anything():
    with pytest.raises(CommandError, match="--token"):
        call_command("replaycheck", "--base-url", "http://127.0.0.1:9")
    with pytest.raises(CommandError, match="--points"):
        call_command("replaycheck", "--points", "three")


@pytest.mark.django_db(transaction=True)
def test_the_machinery_checks_any_agent_function_from_pytest_against_a_live_server(live_server, alice, settings):
    from quests.services.tokens import token_create

    settings.QUESTLOG_HEARTBEAT_TIMEOUT = 1  # a killed run's heartbeat lapses within a second
    _, token = token_create(user=alice, name="replaycheck")
    login = {"base_url": live_server.url, "token": token, "username": "alice", "password": "alice-password"}

    careless = Scenario("careless", agent=careless_agent, mission={"title": "Invite the team", "objective": "Send one invitation."})
    caught = replaycheck(careless, jobs=3, **login)
    assert not caught.ok
    assert caught.baseline_steps == [
        "start run",
        "operation send: plan",
        "operation send: attempt",
        "operation send: side effect",
        "operation send: complete",
        "record decision sent",
        "stop completed",
    ]
    by_point = {row.point: row for row in caught.rows}
    assert [p for p, row in by_point.items() if row.repeated_side_effects] == [2, 3, 4, 5, 6]
    assert by_point[7].ok  # crashed after it finished: the fresh process sees `none` and leaves

    demo = replaycheck("demo", points="13,14,27", jobs=3, **login)
    assert demo.ok, demo.table() + "\n" + demo.details()
    assert [row.point for row in demo.rows] == [13, 14, 27]  # the crashes around side effects
    assert demo.baseline_effects == 3
