"""`/mcp` under `make serve` (scripts/serve: gunicorn's threaded workers, DEBUG off) on PostgreSQL,
through the MCP SDK's client: the production server needs no other worker class or configuration.
(The other tests use pytest-django's live server, Django's own WSGI server as `make run` uses.)"""

import pytest
from django.conf import settings as django_settings

from quests.services.tokens import token_create
from tests.mcp_support import McpHost, ok, refused
from tests.processes import database_url
from tests.test_serve import serve, servers  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.long, pytest.mark.django_db(transaction=True)]


def test_make_serve_answers_mcp_with_the_agent_tokens(alice, bob, tmp_path, servers):
    token = token_create(user=alice, name="served")[1]
    bobs = token_create(user=bob, name="served")[1]
    server = serve(tmp_path, servers, DATABASE_URL=database_url(), CELERY_BROKER_URL=django_settings.CELERY_BROKER_URL)
    host, bob_host = McpHost(server.url, token), McpHost(server.url, bobs)
    try:
        mission_id = ok(host.call("create_mission", title="Served", objective="Over gunicorn."))["mission_id"]
        run_id = ok(host.call("start_run", mission_id=mission_id))["run_id"]
        go = ok(host.call("begin_operation", run_id=run_id, key="k", kind="email", target="t", request={}))
        ok(host.call("complete_operation", operation_id=go["operation_id"], external_id="1", external_status="sent"))
        assert ok(host.call("begin_operation", run_id=run_id, key="k", kind="email", target="t", request={}))["status"] == "completed"
        assert refused(bob_host.call("resume_mission", mission_id=mission_id))["code"] == "not_found"
        assert "Over gunicorn." in host.prompt(mission_id)
    finally:
        host.close()
        bob_host.close()
    assert "Booting worker" in server.log.read_text()
