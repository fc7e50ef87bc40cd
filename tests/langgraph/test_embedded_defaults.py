"""The LangGraph saver on the embedded defaults (`make run`: SQLite, no broker): the conformance
suite at the full level, metadata filters included, and an interrupt decided by a person — every
query the saver's endpoints make works on SQLite as on PostgreSQL."""

import asyncio
import json
import os
import subprocess
import sys

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from questlog_client.langgraph import QuestlogSaver
from questlog_client.people import PersonSession
from tests.langgraph.test_saver import config, stopped_at_interrupt
from tests.test_serve import ROOT, serve, servers  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slow

MAKE_USERS = """
import json, sys
from django.contrib.auth import get_user_model
from quests.services.tokens import token_create
tokens = []
for n in range(int(sys.argv[1])):
    user = get_user_model().objects.create_user(f"graph-{n}", password="graph-password")
    tokens.append(token_create(user=user, name="conformance")[1])
print(json.dumps(tokens))
"""


def users_with_tokens(tmp_path, count: int) -> list[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    environment.update(QUESTLOG_DATA_DIR=str(tmp_path / "data"), DJANGO_SETTINGS_MODULE="config.settings")
    code = f"import django; django.setup(); exec({MAKE_USERS!r})"
    out = subprocess.run([sys.executable, "-c", code, str(count)], cwd=ROOT, env=environment, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_saver_works_on_sqlite(tmp_path, servers):  # noqa: F811
    server = serve(tmp_path, servers)
    assert (tmp_path / "data" / "questlog.sqlite3").exists()
    tokens = users_with_tokens(tmp_path, len(ALL_CAPABILITIES) + 1)
    person_token = tokens.pop()

    @checkpointer_test(name="QuestlogSaver on SQLite")
    async def questlog_saver():
        saver = QuestlogSaver(server.url, tokens.pop(), backoff=0.01)
        yield saver
        saver.close()

    report = asyncio.run(validate(questlog_saver))
    assert {name: result.failures for name, result in report.results.items() if result.failures} == {}
    assert report.conformance_level() == "FULL"

    with QuestlogSaver(server.url, person_token) as saver:
        graph = stopped_at_interrupt(saver)
        assert [t.metadata["step"] for t in saver.list(config(), filter={"source": "loop", "step": 1})] == [1]
        person = PersonSession(server.url, f"graph-{len(ALL_CAPABILITIES)}", "graph-password")
        approval = person.resume(saver.mission_id(config())).approvals[0]
        person.decide_approval(approval.id, "approve")
        person.close()
        assert graph.invoke(saver.resume_command(config()), config())["answer"]["decision"] == "approved"
