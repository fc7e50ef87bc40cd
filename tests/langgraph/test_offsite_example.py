"""examples/langgraph_offsite.py end to end: the script stops at its interrupt and names the mission
page, a person decides through the people API, and the graph finishes with each side effect done
once at the fake service (the edited invitation the one sent; none when the person rejects)."""

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from questlog_client.fake_service import FakeService
from questlog_client.models import Approval
from questlog_client.people import PersonSession
from quests.services.tokens import token_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.long]

ROOT = Path(__file__).resolve().parents[2]
Decide = Callable[[PersonSession, Approval], None]


def run_the_example(url: str, token: str, service_path: Path, decide: Decide) -> tuple[dict[str, Any], str]:
    """Run the script until it waits, let `decide` act as the person, and answer the final state
    it printed and the mission's status."""
    script = subprocess.Popen(
        [
            sys.executable,
            "examples/langgraph_offsite.py",
            "--url",
            url,
            "--token",
            token,
            "--service",
            str(service_path),
            "--thread",
            "offsite-test",
            "--poll",
            "0.1",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    person = PersonSession(url, "alice", "alice-password")
    try:
        lines = []
        for line in script.stdout:
            lines.append(line)
            if line.startswith("Waiting for a person"):
                break
        assert lines and lines[-1].startswith("Waiting for a person"), "".join(lines) + script.stderr.read()
        page = lines[-1].rsplit(" ", 1)[-1].strip()
        assert page.startswith(f"{url}/missions/") and page.endswith("/")
        mission_id = int(page.rstrip("/").rsplit("/", 1)[-1])
        (approval,) = [a for a in person.resume(mission_id).approvals if a.status == "pending"]
        assert approval.action == "send the invitations"
        assert approval.payload["to"] == "team@example.com"
        decide(person, approval)
        out, err = script.communicate(timeout=120)
        assert script.returncode == 0, out + err
        return json.loads(out[out.index("{") :]), person.mission(mission_id)["status"]
    finally:
        person.close()
        if script.poll() is None:
            script.kill()
            script.wait()


def test_the_example_waits_for_a_person_and_finishes_with_each_side_effect_once(live_server, alice, tmp_path):
    _, token = token_create(user=alice, name="offsite-example")
    edited: dict[str, Any] = {}

    def edit(person: PersonSession, approval: Approval) -> None:
        edited.update(approval.payload, subject="Team offsite, May 14-16")
        person.decide_approval(approval.id, "edit", payload=edited, note="A clearer subject.")

    final, status = run_the_example(live_server.url, token, tmp_path / "service.sqlite3", edit)

    assert status == "completed"
    assert final["decision"] == {"decision": "approved", "payload": edited, "note": "A clearer subject."}
    effects = FakeService(tmp_path / "service.sqlite3").effects()
    assert sorted(kind for kind, _, _ in effects) == ["email.send", "venue.hold"]
    assert set(effects.values()) == {1}
    (sent,) = [json.loads(payload) for kind, _, payload in effects if kind == "email.send"]
    assert sent == edited
    assert final["sent"].startswith("EMAIL-")


def test_a_rejected_invitation_is_not_sent_and_the_graph_still_finishes(live_server, alice, tmp_path):
    _, token = token_create(user=alice, name="offsite-example")

    def reject(person: PersonSession, approval: Approval) -> None:
        person.decide_approval(approval.id, "reject", note="Wait for the budget.")

    final, status = run_the_example(live_server.url, token, tmp_path / "service.sqlite3", reject)

    assert status == "completed"
    assert final["decision"]["decision"] == "rejected"
    assert final["sent"] == "not sent: Wait for the budget."
    assert [kind for kind, _, _ in FakeService(tmp_path / "service.sqlite3").effects()] == ["venue.hold"]
