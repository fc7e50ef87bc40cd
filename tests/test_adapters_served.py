"""Both adapters against `make serve` (scripts/serve: gunicorn) on the embedded defaults (SQLite, as
`make run` uses) and on PostgreSQL: LangGraph's conformance suite at the full level, a graph's
interrupt decided by a person with metadata filters on the way, and the OpenAI Agents example from
interruption to completion. Every query the adapters' endpoints make works on both databases."""

import asyncio
import json
import os
import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from questlog_client.langgraph import QuestlogSaver
from questlog_client.people import PersonSession
from quests.services.tokens import token_create
from tests.langgraph.test_saver import config, stopped_at_interrupt
from tests.processes import database_url
from tests.test_serve import ROOT, serve, servers  # noqa: F401  (the fixture)

# The PostgreSQL server works on the test database, so the tests' users must be committed there.
pytestmark = [pytest.mark.long, pytest.mark.django_db(transaction=True)]

PASSWORD = "graph-password"
MAKE_USERS = """
import json, sys
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from quests.services.tokens import token_create
tokens = []
for n in range(int(sys.argv[1])):
    user = get_user_model().objects.create_user(f"{sys.argv[3]}-{n}", password=sys.argv[2])
    tokens.append(token_create(user=user, name="adapters")[1])
print(json.dumps(tokens))
"""


def sqlite_users(tmp_path, count: int, prefix: str = "graph") -> list[str]:
    """Users graph-0… (`prefix`-0…) with a token each, in the server's own SQLite database."""
    environment = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    environment.update(QUESTLOG_DATA_DIR=str(tmp_path / "data"), DJANGO_SETTINGS_MODULE="config.settings")
    code = f"import django; django.setup(); exec({MAKE_USERS!r})"
    out = subprocess.run([sys.executable, "-c", code, str(count), PASSWORD, prefix], cwd=ROOT, env=environment, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def postgresql_users(count: int) -> list[str]:
    users = [get_user_model().objects.create_user(f"graph-{n}") for n in range(count)]
    # The server checks passwords with the project's own hasher, not the tests' fast one.
    hasher = PBKDF2PasswordHasher()
    users[-1].password = hasher.encode(PASSWORD, hasher.salt())
    users[-1].save(update_fields=["password"])
    return [token_create(user=user, name="adapters")[1] for user in users]


@pytest.fixture(params=["sqlite", "postgresql"])
def served(request, tmp_path, servers):  # noqa: F811
    """A served Questlog and, for users graph-0…graph-N, their tokens (the last one is the person's)."""
    count = len(ALL_CAPABILITIES) + 1
    if request.param == "sqlite":
        server = serve(tmp_path, servers)
        assert (tmp_path / "data" / "questlog.sqlite3").exists()
        return server, sqlite_users(tmp_path, count)
    tokens = postgresql_users(count)
    return serve(tmp_path, servers, DATABASE_URL=database_url()), tokens


def test_the_langgraph_saver_passes_the_conformance_suite(served):
    server, tokens = served
    tokens = tokens[:-1]

    @checkpointer_test(name="QuestlogSaver on make serve")
    async def questlog_saver():
        saver = QuestlogSaver(server.url, tokens.pop(), backoff=0.01)
        yield saver
        saver.close()

    report = asyncio.run(validate(questlog_saver))
    assert {name: result.failures for name, result in report.results.items() if result.failures} == {}
    assert report.conformance_level() == "FULL"


def test_a_graphs_interrupt_is_decided_by_a_person_and_the_graph_goes_on(served):
    server, tokens = served
    person_name = f"graph-{len(tokens) - 1}"
    with QuestlogSaver(server.url, tokens[-1]) as saver:
        graph = stopped_at_interrupt(saver)
        assert [t.metadata["step"] for t in saver.list(config(), filter={"source": "loop", "step": 1})] == [1]
        assert [t.metadata["source"] for t in saver.list(config(), filter={"step": -1})] == ["input"]
        person = PersonSession(server.url, person_name, PASSWORD)
        approval = person.resume(saver.mission_id(config())).approvals[0]
        person.decide_approval(approval.id, "edit", payload={"to": "boss@example.com"}, note="Only the boss")
        person.close()
        result = graph.invoke(saver.resume_command(config()), config())
        assert result["answer"] == {"decision": "approved", "payload": {"to": "boss@example.com"}, "note": "Only the boss"}


def test_the_openai_agents_example_runs_to_completion(served):
    server, tokens = served
    example = ROOT / "examples" / "openai_agents_approval.py"
    result = subprocess.run(
        [sys.executable, str(example), "--user", f"graph-{len(tokens) - 1}", "--password", PASSWORD, "--poll", "0.2"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "QUESTLOG_URL": server.url, "QUESTLOG_TOKEN": tokens[-1]},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("completed; invitations sent: 1")
