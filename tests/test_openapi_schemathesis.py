"""The OpenAPI document describes every answer: schemathesis generates requests from
/api/v1/openapi.json against a live server and checks every response (status documented, body
matching its schema, schema-valid requests accepted, invalid ones refused, auth enforced). Once
as an agent with a token, once as a person with a session and the CSRF header, each over every
operation, at the depth the contract promises: all checks, 25 examples per operation, and every
phase (the document's examples, the coverage phase's boundary cases, fuzzing and stateful
sequences that feed one answer's ids into the next request)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from quests.services import snapshots

ST = Path(sys.executable).with_name("st")
CONFIG = Path(__file__).with_name("schemathesis.toml")
ROOT = Path(__file__).resolve().parent.parent
MAX_EXAMPLES = 25
PHASES = "examples,coverage,fuzzing,stateful"

# A few minutes each against a live server: left out of `make test-fast`, run by `make test`.
pytestmark = pytest.mark.long


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


def schemathesis(url: str, headers: list[str], tmp_path: Path, *options: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # A fixed seed: the same cases every run, in bounded time.
    command = [
        str(ST),
        "--config-file",
        str(CONFIG),
        "--no-color",
        "run",
        f"{url}/api/v1/openapi.json",
        "--checks",
        "all",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--phases",
        PHASES,
        "--seed",
        "9",
        "--workers",
        "2",
        "--generation-database",
        "none",
        "--request-timeout",
        "30",
        *options,
    ]
    for header in headers:
        command += ["-H", header]
    # Its working directory is a temporary one: nothing it writes lands in the repository.
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900, env={**os.environ, **(env or {})})


def assert_no_failures(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    assert "Failures:" not in result.stdout, result.stdout[-20000:]


def test_every_answer_to_an_agent_token_matches_the_document(world, agent, tmp_path):
    result = schemathesis(world, [f"Authorization: {agent.headers['HTTP_AUTHORIZATION']}"], tmp_path)
    assert_no_failures(result)


def test_every_answer_to_a_signed_in_person_matches_the_document(world, person, tmp_path):
    """Every route as a person: the people-only ones, and the agent routes, which a session may call too."""
    cookies = person.client.cookies
    session = {
        "SCHEMATHESIS_HOOKS": "tests.schemathesis_person",
        "PYTHONPATH": str(ROOT),
        "QUESTLOG_ST_SESSION": cookies["sessionid"].value,
        "QUESTLOG_ST_CSRF": cookies["csrftoken"].value,
    }
    result = schemathesis(world, [], tmp_path, env=session)
    assert_no_failures(result)
