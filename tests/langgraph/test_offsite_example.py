"""examples/langgraph_offsite.py end to end: the script stops at its interrupt and names the mission
page, a person edits and approves the invitations through the people API, and the graph finishes
with each side effect done once at the fake service, the edited invitation the one sent."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from questlog_client.fake_service import FakeService
from questlog_client.people import PersonSession
from quests.services.tokens import token_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_waits_for_a_person_and_finishes_with_each_side_effect_once(live_server, alice, tmp_path):
    _, token = token_create(user=alice, name="offsite-example")
    service_path = tmp_path / "service.sqlite3"
    script = subprocess.Popen(
        [sys.executable, "examples/langgraph_offsite.py", "--url", live_server.url, "--token", token,
         "--service", str(service_path), "--thread", "offsite-test", "--poll", "0.1"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        lines = []
        for line in script.stdout:
            lines.append(line)
            if line.startswith("Waiting for a person"):
                break
        assert lines and lines[-1].startswith("Waiting for a person"), "".join(lines) + script.stderr.read()
        page = lines[-1].rsplit(" ", 1)[-1].strip()
        assert page.startswith(f"{live_server.url}/missions/") and page.endswith("/")
        mission_id = int(page.rstrip("/").rsplit("/", 1)[-1])

        person = PersonSession(live_server.url, "alice", "alice-password")
        try:
            (approval,) = [a for a in person.resume(mission_id).approvals if a.status == "pending"]
            assert approval.action == "send the invitations"
            assert approval.payload["to"] == "team@example.com"
            edited = {**approval.payload, "subject": "Team offsite, May 14-16"}
            person.decide_approval(approval.id, "edit", payload=edited, note="A clearer subject.")
            out, err = script.communicate(timeout=120)
            assert script.returncode == 0, out + err
            assert person.mission(mission_id)["status"] == "completed"
        finally:
            person.close()
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()

    final = json.loads(out[out.index("{"):])
    assert final["decision"] == {"decision": "approved", "payload": edited, "note": "A clearer subject."}
    effects = FakeService(service_path).effects()
    assert sorted(kind for kind, _, _ in effects) == ["email.send", "venue.hold"]
    assert set(effects.values()) == {1}
    (sent,) = [json.loads(payload) for kind, _, payload in effects if kind == "email.send"]
    assert sent == edited
    assert final["sent"].startswith("EMAIL-")
