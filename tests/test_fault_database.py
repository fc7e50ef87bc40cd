"""PostgreSQL stopped for 10 s in the middle of agent traffic (issue 12), on a throwaway cluster this
test makes with initdb and pg_ctl on a port of its own (never the suite's PostgreSQL): while it is
down the API answers 503 with a JSON body and Retry-After, never an HTML 500, and pages a plain
error page; when it is back everything recovers without a restart; no acknowledged write is lost,
and the run left behind is ended by the sweep."""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import httpx
import psycopg
import pytest

from questlog_client.people import PersonSession
from tests.processes import free_port, wait_for
from tests.test_serve import ROOT, serve, servers  # noqa: F401  (the fixture)

pytestmark = pytest.mark.long

PG_BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1] if glob.glob("/usr/lib/postgresql/*/bin") else ""
DOWN_SECONDS = 10
PASSWORD = "outage-password"
MAKE_USER = f"""
import json
from django.contrib.auth import get_user_model
from quests.services.tokens import token_create
user = get_user_model().objects.create_user("outage", password={PASSWORD!r})
print(json.dumps(token_create(user=user, name="outage")[1]))
"""


def as_postgres(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    # PostgreSQL's tools refuse to run as root.
    return subprocess.run(["runuser", "-u", "postgres", "--", *command], capture_output=True, text=True, check=check, timeout=120)


class Cluster:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="questlog-outage-")
        shutil.chown(self.dir, "postgres", "postgres")
        self.port = free_port()
        self.data = os.path.join(self.dir, "data")
        as_postgres(f"{PG_BIN}/initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE questlog")

    def url(self, database: str = "questlog") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -c fsync=off"
        as_postgres(f"{PG_BIN}/pg_ctl", "-D", self.data, "-o", options, "-l", os.path.join(self.dir, "log"), "-w", "start")

    def stop(self) -> None:
        as_postgres(f"{PG_BIN}/pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop", check=False)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def cluster():
    if not PG_BIN:
        pytest.fail("PostgreSQL's initdb and pg_ctl are not installed (scripts/ensure-services installs them).")
    made = Cluster()
    yield made
    made.remove()


def in_cluster(cluster: Cluster, code: str, **env: str) -> str:
    environment = {**os.environ, "DATABASE_URL": cluster.url(), "DJANGO_SETTINGS_MODULE": "config.settings", **env}
    out = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); exec({code!r})"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""


def test_postgresql_stopped_for_ten_seconds_under_agent_traffic(cluster, tmp_path, servers):  # noqa: F811
    dead_broker = f"redis://127.0.0.1:{free_port()}/0"
    server = serve(tmp_path, servers, DATABASE_URL=cluster.url(), CELERY_BROKER_URL=dead_broker)
    token = json.loads(in_cluster(cluster, MAKE_USER))
    person = PersonSession(server.url, "outage", PASSWORD)
    api = httpx.Client(base_url=f"{server.url}/api/v1/", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    mission = api.post("missions", json={"title": "Through the outage", "objective": "Keep working"}).json()
    run = api.post(f"missions/{mission['id']}/runs", json={"agent": "outage"}).json()["run"]

    acknowledged: list[str] = []
    answers: list[tuple[float, int, str, str]] = []  # (time, status, content type, Retry-After)
    stop = threading.Event()

    def traffic() -> None:
        n = 0
        while not stop.is_set():
            text = f"decision {n}"
            response = api.post(f"runs/{run['id']}/records", json={"kind": "decision", "text": text, "key": f"d-{n}"})
            answers.append((time.monotonic(), response.status_code, response.headers.get("content-type", ""), response.headers.get("retry-after", "")))
            if response.status_code == 201:
                acknowledged.append(text)
                n += 1  # a refused write is sent again with the same key, as questlog_client does
            api.post(f"runs/{run['id']}/heartbeat")
            time.sleep(0.05)

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        time.sleep(2)
        stopped_at = time.monotonic()
        cluster.stop()
        time.sleep(DOWN_SECONDS / 2)
        page = person.page(f"/missions/{mission['id']}/")
        time.sleep(DOWN_SECONDS / 2)
        cluster.start()
        started_at = time.monotonic()
        wait_for(lambda: answers and answers[-1][1] == 201 and answers[-1][0] > started_at, 30, "the API answering again")
        time.sleep(1)
    finally:
        stop.set()
        thread.join(timeout=60)

    statuses = {status for _, status, _, _ in answers}
    assert statuses <= {201, 503}, statuses  # never a 500
    down = [a for a in answers if a[1] == 503]
    assert down, "the API answered 503 while PostgreSQL was down"
    assert all(kind.startswith("application/json") and retry for _, _, kind, retry in down)
    assert all(stopped_at <= at <= started_at + 5 for at, *_ in down)
    assert page.status_code == 503 and "Traceback" not in page.text and "<html" in page.text.lower()
    print(f"503 for {down[-1][0] - down[0][0]:.1f} s ({len(down)} answers); {len(acknowledged)} writes acknowledged")

    with psycopg.connect(cluster.url()) as conn:
        stored = [
            text for (text,) in conn.execute("SELECT text FROM checkpoints_record WHERE mission_id = %s AND kind = 'decision' ORDER BY id", [mission["id"]])
        ]
    assert stored == acknowledged, "every acknowledged write is stored, once, in order"

    # The agent is gone: the sweep ends the run nobody heartbeats any more.
    time.sleep(2)
    in_cluster(cluster, "from quests.services.runs import sweep_stalled_runs; print(sweep_stalled_runs())", QUESTLOG_HEARTBEAT_TIMEOUT="1")
    with psycopg.connect(cluster.url()) as conn:
        active = conn.execute("SELECT count(*) FROM quests_run WHERE ended_at IS NULL").fetchone()[0]
    assert active == 0
    person.close()
    api.close()
