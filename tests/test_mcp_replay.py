"""Replaycheck for MCP: an agent driven only through Questlog's MCP tools (tests/mcp_replay_agent.py,
a process of its own) is killed with SIGKILL right after each of its steps, in turn, and a fresh
process resumes the mission through MCP. Whatever the crash point, the outside world sees every
side effect exactly once, and the mission ends as the uninterrupted run ends."""

import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from checkpoints.models import Operation
from questlog_client.fake_service import FakeService, canonical
from quests.models import Mission, Run
from quests.services.tokens import token_create
from tests.mcp_replay_agent import EFFECTS
from tests.mcp_support import McpHost, ok

pytestmark = [pytest.mark.long, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = Counter({(kind, target, canonical(request)): 1 for _, kind, target, request in EFFECTS})


def agent(url: str, token: str, mission_id: int, service: Path, crash_after: int | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "tests.mcp_replay_agent", url, token, str(mission_id), str(service)]
    return subprocess.run(command + ([str(crash_after)] if crash_after else []), cwd=ROOT, capture_output=True, text=True, timeout=120)


def crashed_run_goes_stale(mission_id: int) -> None:
    """The killed agent's run is still active until its heartbeat lapses; lapse it now rather than
    wait, so the next start ends it `interrupted` as it would after QUESTLOG_HEARTBEAT_TIMEOUT."""
    aged = timezone.now() - timedelta(seconds=settings.QUESTLOG_HEARTBEAT_TIMEOUT + 5)
    Run.objects.filter(mission_id=mission_id, ended_at__isnull=True).update(heartbeat_at=aged)


def test_an_mcp_agent_killed_after_each_step_resumes_through_mcp_with_no_repeated_effect(live_server, alice, tmp_path):
    token = token_create(user=alice, name="mcp-replay")[1]
    host = McpHost(live_server.url, token)
    try:

        def new_mission(name: str) -> int:
            return ok(host.call("create_mission", title=f"Offsite {name}", objective="Book and confirm, once."))["mission_id"]

        clean_service = tmp_path / "clean.sqlite3"
        clean = agent(live_server.url, token, new_mission("clean"), clean_service)
        assert clean.returncode == 0, clean.stderr[-3000:]
        steps = int(clean.stdout.split()[-1])
        assert FakeService(clean_service).effects() == EXPECTED

        repeated: dict[int, Counter] = {}
        for crash_after in range(1, steps + 1):
            mission_id = new_mission(f"crash {crash_after}")
            service = tmp_path / f"crash-{crash_after}.sqlite3"
            killed = agent(live_server.url, token, mission_id, service, crash_after)
            assert killed.returncode == -9, (crash_after, killed.stderr[-3000:])
            crashed_run_goes_stale(mission_id)
            resumed = agent(live_server.url, token, mission_id, service)
            assert resumed.returncode == 0, (crash_after, resumed.stderr[-3000:])
            effects = FakeService(service).effects()
            if effects != EXPECTED:
                repeated[crash_after] = effects - EXPECTED
            assert Mission.objects.get(pk=mission_id).status == "completed", crash_after
            assert set(Operation.objects.filter(mission_id=mission_id).values_list("status", flat=True)) == {"completed"}
    finally:
        host.close()
    assert steps >= 2 * len(EFFECTS)
    assert repeated == {}, f"effects repeated or missing after a crash at these steps: {repeated}"
    print(f"MCP replay: {steps} crash points, 0 repeated effects")
