"""The OpenAPI document describes every answer: schemathesis generates requests from
/api/v1/openapi.json against a live server and checks every response (status documented, body
matching its schema, schema-valid requests accepted, invalid ones refused, auth enforced). Once
as an agent with a token, once as a person with a session, so the people-only routes run too."""

import subprocess
import sys
from pathlib import Path

import pytest

from quests.services import snapshots

ST = Path(sys.executable).with_name("st")
CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.fixture
def no_broker(monkeypatch):
    # As if the broker were down (the sweep publishes later): thousands of committed requests
    # must not leave wake-up messages in the test broker's queue for other tests to count.
    monkeypatch.setattr(snapshots, "snapshot_enqueue", lambda request_id, not_before=None: False)


@pytest.fixture
def world(transactional_db, no_broker, live_server, agent, person, mission, run):
    """A live server on the test database, with one of each object so that some ids exist."""
    bodies = {
        "checkpoints": {"agent_state": {"step": 1}},
        "records": {"kind": "decision", "text": "Use the lake venue"},
        "operations": {"key": "op-1", "kind": "email", "target": "client", "request": {"to": "x"}},
        "milestones": {"kind": "research_complete", "title": "Research"},
        "memory-proposals": {"name": "tone", "value": "formal", "reason": "asked"},
    }
    for collection, body in bodies.items():
        assert agent.post(f"runs/{run['id']}/{collection}", body).status_code == 201
    return live_server.url


def schemathesis(url: str, headers: list[str], tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    # A fixed seed and few examples per operation: the same cases every run, in bounded time
    # (the coverage phase's boundary cases are most of it).
    command = [
        str(ST), "--config-file", str(CONFIG), "--no-color", "run", f"{url}/api/v1/openapi.json",
        "--checks", "all", "--max-examples", "2", "--seed", "9", "--workers", "2",
        "--generation-database", "none", "--request-timeout", "30", *options,
    ]
    for header in headers:
        command += ["-H", header]
    # Its working directory is a temporary one: nothing it writes lands in the repository.
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)


def assert_no_failures(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    assert "Failures:" not in result.stdout, result.stdout[-20000:]


def test_every_answer_to_an_agent_token_matches_the_document(world, agent, tmp_path):
    result = schemathesis(world, [f"Authorization: {agent.headers['HTTP_AUTHORIZATION']}"], tmp_path)
    assert_no_failures(result)


def test_every_answer_to_a_signed_in_person_matches_the_document(world, person, tmp_path):
    """The people-only routes; the agent routes answer a session as they answer a token."""
    cookies = person.client.cookies
    session = f"Cookie: sessionid={cookies['sessionid'].value}; csrftoken={cookies['csrftoken'].value}"
    result = schemathesis(world, [session, f"X-CSRFToken: {cookies['csrftoken'].value}"], tmp_path, "--include-tag", "people")
    assert_no_failures(result)
