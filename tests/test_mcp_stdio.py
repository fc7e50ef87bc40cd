"""`questlog-mcp`, the stdio server for hosts that only launch local commands, through the MCP
SDK's own stdio client: the console script this package installs, talking to a live Questlog
server over its HTTP API with QUESTLOG_URL and QUESTLOG_TOKEN."""

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from checkpoints.models import Operation
from quests.services.tokens import token_create
from tests.mcp_support import TOOLS, ok, refused

pytestmark = pytest.mark.django_db(transaction=True)

# The console script `make install` puts beside the interpreter (pyproject's [project.scripts]).
COMMAND = Path(sys.executable).with_name("questlog-mcp")


def stdio_session(url: str, token: str, work):
    params = StdioServerParameters(command=str(COMMAND), env={"QUESTLOG_URL": url, "QUESTLOG_TOKEN": token})

    async def main():
        async with Client(params) as client:
            return await work(client)

    return asyncio.run(main())


def test_the_console_script_is_installed():
    assert COMMAND.exists(), "make install installs questlog-mcp"


def test_a_quest_through_the_stdio_server(live_server, alice):
    token = token_create(user=alice, name="stdio")[1]

    async def quest(client):
        tools = {t.name for t in (await client.list_tools()).tools}
        made = (await client.call_tool("create_mission", {"title": "Invite the team", "objective": "Everyone invited once."})).structured_content
        run = ok(await client.call_tool("start_run", {"mission_id": made["mission_id"], "agent": "stdio"}))
        arguments = {"run_id": run["run_id"], "key": "invite", "kind": "email", "target": "team", "request": {"to": "team"}}
        go = ok(await client.call_tool("begin_operation", arguments))
        ok(await client.call_tool("complete_operation", {"operation_id": go["operation_id"], "external_id": "m-1", "external_status": "sent"}))
        again = ok(await client.call_tool("begin_operation", arguments))
        checkpoint = ok(await client.call_tool("save_checkpoint", {"run_id": run["run_id"], "agent_state": {"invited": True}}))
        missing = refused(await client.call_tool("resume_mission", {"mission_id": 999_999}))
        prompt = await client.get_prompt("resume_mission", {"mission_id": str(made["mission_id"])})
        return tools, made, go, again, checkpoint, missing, prompt.messages[0].content.text

    tools, made, go, again, checkpoint, missing, briefing = stdio_session(live_server.url, token, quest)
    assert tools == TOOLS
    assert isinstance(made["mission_id"], int) and go["status"] == "go"
    assert again["status"] == "completed" and again["receipt"]["external_id"] == "m-1"
    assert isinstance(checkpoint["checkpoint_id"], int)
    assert missing["code"] == "not_found"
    assert "Everyone invited once." in briefing and "`invite`" in briefing
    assert Operation.objects.get(pk=go["operation_id"]).attempts == 1


def test_the_stdio_server_with_a_bad_token_answers_each_call_with_the_apis_refusal(live_server):
    async def listing(client):
        return await client.call_tool("list_missions", {})

    error = refused(stdio_session(live_server.url, "qlt_wrong", listing))
    assert error["code"] == "unauthenticated"


def test_the_stdio_server_needs_its_url_and_token():
    done = subprocess.run([str(COMMAND)], env={"QUESTLOG_URL": "http://127.0.0.1:1"}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "QUESTLOG_TOKEN" in done.stderr
