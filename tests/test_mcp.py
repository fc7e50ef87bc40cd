"""Questlog's MCP server at `/mcp`, through the MCP SDK's own client against a live server: every
tool, the errors as tool errors with the API's code and sentence, heartbeats, tokens (another
person's, a mission-limited one, a bad one), exactly-once `begin_operation`, the prompt and the
resource."""

from datetime import timedelta
from types import SimpleNamespace

import httpx
import pytest
from django.db.utils import OperationalError
from django.utils import timezone

from questlog_client.errors import ApiError
from questlog_client.mcp.tools import refusal
from quests.api import mcp_backend
from quests.models import Mission, Run
from quests.services import throttle
from quests.services.runs import sweep_stalled_runs
from quests.services.tokens import token_create
from tests.mcp_support import TOOLS, McpHost, ok, refused, with_client

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def token(alice) -> str:
    return token_create(user=alice, name="mcp-host")[1]


@pytest.fixture
def url(live_server) -> str:
    return live_server.url


@pytest.fixture
def hosts():
    opened: list[McpHost] = []
    yield opened
    for host in opened:
        host.close()


@pytest.fixture
def connect(url, hosts):
    """An MCP host's session with the server for a token, kept open for the test."""

    def open_for(token: str) -> McpHost:
        hosts.append(McpHost(url, token))
        return hosts[-1]

    return open_for


@pytest.fixture
def mcp(connect, token) -> McpHost:
    return connect(token)


def offsite(mcp: McpHost) -> int:
    made = ok(mcp.call("create_mission", title="Book the offsite", objective="A venue for 12 people.", constraints=["Never email the client before Friday"]))
    assert isinstance(made["mission_id"], int) and made["status"] == "ready"
    return made["mission_id"]


def started(mcp: McpHost, mission_id: int) -> int:
    run = ok(mcp.call("start_run", mission_id=mission_id, agent="mcp-test"))
    assert isinstance(run["run_id"], int)
    return run["run_id"]


def test_the_server_lists_every_tool_the_prompt_and_the_resource_template(url, token, mcp):
    async def listing(client):
        return await client.list_tools(), await client.list_prompts(), await client.list_resource_templates()

    tools, prompts, templates = with_client(url, token, listing)
    assert {t.name for t in tools.tools} == TOOLS
    assert [p.name for p in prompts.prompts] == ["resume_mission"]
    assert [t.uri_template for t in templates.resource_templates] == ["questlog://missions/{mission_id}/resume"]


def test_every_tool_through_a_quest(url, token, mcp):
    mission_id = offsite(mcp)
    listed = ok(mcp.call("list_missions"))["missions"]
    assert [m["mission_id"] for m in listed] == [mission_id]
    assert ok(mcp.call("list_missions", status="running"))["missions"] == []

    resume = ok(mcp.call("resume_mission", mission_id=mission_id))
    assert resume["mission_id"] == mission_id and resume["next_action"] == "resume"
    assert [c["text"] for c in resume["constraints"]] == ["Never email the client before Friday"]

    run = ok(mcp.call("start_run", mission_id=mission_id, agent="planner"))
    run_id = run["run_id"]
    assert run["resume"]["mission"]["id"] == mission_id and run["run"]["agent"] == "planner"
    assert ok(mcp.call("list_missions", status="running"))["missions"][0]["mission_id"] == mission_id

    saved = ok(mcp.call("save_checkpoint", run_id=run_id, agent_state={"step": 1}, note="venues listed"))
    assert isinstance(saved["checkpoint_id"], int) and isinstance(saved["seq"], int)
    record = ok(mcp.call("add_record", run_id=run_id, kind="decision", text="Lakeside Lodge", data={"price": 900}))
    assert isinstance(record["record_id"], int) and record["kind"] == "decision"

    go = ok(mcp.call("begin_operation", run_id=run_id, key="hold-lakeside", kind="reservation.hold", target="lakeside", request={"people": 12}))
    assert go["status"] == "go" and go["attempts"] == 1 and "receipt" not in go
    done = ok(mcp.call("complete_operation", operation_id=go["operation_id"], external_id="H-1", external_status="held", receipt={"until": "Friday"}))
    assert done == {
        "operation_id": go["operation_id"],
        "status": "completed",
        "receipt": {"external_id": "H-1", "external_status": "held", "receipt": {"until": "Friday"}},
    }

    flaky = ok(mcp.call("begin_operation", run_id=run_id, key="quote", kind="quote", target="caterer", request={}))
    failed = ok(mcp.call("fail_operation", operation_id=flaky["operation_id"], error="timed out", retryable=True))
    assert failed["status"] == "failed" and failed["retryable"] is True
    again = ok(mcp.call("begin_operation", run_id=run_id, key="quote", kind="quote", target="caterer", request={}))
    assert again["status"] == "go" and again["attempts"] == 2

    # Attempted, and the agent never said how it went: the next begin says reconcile, not go.
    ok(mcp.call("begin_operation", run_id=run_id, key="deposit", kind="payment", target="lakeside", request={"eur": 200}))
    unknown = ok(mcp.call("begin_operation", run_id=run_id, key="deposit", kind="payment", target="lakeside", request={"eur": 200}))
    assert unknown["status"] == "reconcile" and unknown["target"] == "lakeside" and unknown["request"] == {"eur": 200}

    asked = ok(mcp.call("request_approval", run_id=run_id, action="send the invitations", payload={"to": "team"}, reason="emails cannot be unsent"))
    assert isinstance(asked["approval_id"], int) and asked["status"] == "pending"
    # The run ended waiting: a write from it is the API's run_ended, with its stop reason.
    ended = refused(mcp.call("add_record", run_id=run_id, kind="note", text="still here?"))
    assert ended["code"] == "run_ended" and ended["stop_reason"] == "waiting_for_approval"
    assert "start a new run" in ended["message"]

    other = offsite(mcp)
    other_run = started(mcp, other)
    stopped = ok(mcp.call("stop_run", run_id=other_run, reason="completed", detail="nothing to do"))
    assert stopped["run_id"] == other_run and stopped["stop_reason"] == "completed"
    assert Mission.objects.get(pk=other).status == "completed"


def test_errors_carry_the_api_code_sentence_and_fields(url, token, mcp):
    mission_id = offsite(mcp)
    too_long = refused(mcp.call("create_mission", title="x" * 1000, objective="o"))
    assert too_long["code"] == "invalid" and too_long["field"] == "title"
    assert refused(mcp.call("start_run", mission_id=999_999))["code"] == "not_found"
    run_id = started(mcp, mission_id)
    busy = refused(mcp.call("start_run", mission_id=mission_id))
    assert busy["code"] == "run_active" and busy["run_id"] == run_id
    ok(mcp.call("begin_operation", run_id=run_id, key="k", kind="email", target="a", request={"n": 1}))
    reuse = refused(mcp.call("begin_operation", run_id=run_id, key="k", kind="email", target="a", request={"n": 2}))
    assert reuse["code"] == "key_reuse"
    nul = refused(mcp.call("add_record", run_id=run_id, kind="note", text="a\x00b"))
    assert nul["code"] == "invalid"
    result = mcp.call("add_record", run_id=run_id, kind="diary", text="not a kind")
    assert result.is_error  # refused by the tool's own schema: the API's kinds only


def test_begin_operation_on_a_completed_key_returns_the_receipt_never_go(url, token, mcp):
    mission_id = offsite(mcp)
    first_run = started(mcp, mission_id)
    arguments = {"key": "book-lakeside", "kind": "reservation.book", "target": "lakeside", "request": {"people": 12}}
    go = ok(mcp.call("begin_operation", run_id=first_run, **arguments))
    ok(mcp.call("complete_operation", operation_id=go["operation_id"], external_id="B-7", external_status="booked"))
    receipt = {"external_id": "B-7", "external_status": "booked", "receipt": {}}
    for _ in range(2):  # in the same run, again and again
        again = ok(mcp.call("begin_operation", run_id=first_run, **arguments))
        assert again["status"] == "completed" and again["receipt"] == receipt and again["attempts"] == 1
    # A new session: the first run stopped, a new one begins the same key.
    ok(mcp.call("stop_run", run_id=first_run, reason="blocked_external", detail="session over"))
    Mission.objects.filter(pk=mission_id).update(status="ready")  # as unblocking does
    second_run = started(mcp, mission_id)
    later = ok(mcp.call("begin_operation", run_id=second_run, **arguments))
    assert later["status"] == "completed" and later["receipt"] == receipt and later["operation_id"] == go["operation_id"]


def test_every_tool_call_on_a_run_refreshes_its_heartbeat_and_a_silent_run_ends_stalled(url, token, mcp, settings):
    mission_id = offsite(mcp)
    run_id = started(mcp, mission_id)

    def aged() -> None:
        Run.objects.filter(pk=run_id).update(heartbeat_at=timezone.now() - timedelta(seconds=settings.QUESTLOG_HEARTBEAT_TIMEOUT - 5))

    def fresh() -> bool:
        return timezone.now() - Run.objects.get(pk=run_id).heartbeat_at < timedelta(seconds=5)

    go = None
    calls = [
        ("save_checkpoint", {"agent_state": {"step": 2}}),
        ("add_record", {"kind": "note", "text": "checked the venues"}),
        ("begin_operation", {"key": "hold", "kind": "hold", "target": "lodge", "request": {}}),
    ]
    for name, arguments in calls:
        aged()
        answer = ok(mcp.call(name, run_id=run_id, **arguments))
        go = answer if name == "begin_operation" else go
        assert fresh(), name
    ok(mcp.call("complete_operation", operation_id=go["operation_id"], external_id="1", external_status="held"))
    aged()
    # A replayed begin writes nothing to the ledger, and still says the agent is alive.
    assert ok(mcp.call("begin_operation", run_id=run_id, key="hold", kind="hold", target="lodge", request={}))["status"] == "completed"
    assert fresh()

    # The host vanished: no call comes, and the sweep ends the run like any other stale run.
    Run.objects.filter(pk=run_id).update(heartbeat_at=timezone.now() - timedelta(seconds=settings.QUESTLOG_HEARTBEAT_TIMEOUT + 5))
    assert sweep_stalled_runs() == 1
    assert Run.objects.get(pk=run_id).stop_reason == "interrupted"
    ended = refused(mcp.call("save_checkpoint", run_id=run_id, agent_state={}))
    assert ended["code"] == "run_ended" and ended["stop_reason"] == "interrupted"


def test_another_persons_token_sees_nothing_of_the_mission(url, token, mcp, connect, bob):
    mission_id = offsite(mcp)
    run_id = started(mcp, mission_id)
    op = ok(mcp.call("begin_operation", run_id=run_id, key="k", kind="email", target="client", request={}))
    bobs = token_create(user=bob, name="bob-host")[1]
    bob_mcp = connect(bobs)
    assert ok(bob_mcp.call("list_missions"))["missions"] == []
    attempts = [
        bob_mcp.call("resume_mission", mission_id=mission_id),
        bob_mcp.call("start_run", mission_id=mission_id),
        bob_mcp.call("save_checkpoint", run_id=run_id, agent_state={}),
        bob_mcp.call("add_record", run_id=run_id, kind="note", text="hi"),
        bob_mcp.call("begin_operation", run_id=run_id, key="k", kind="email", target="client", request={}),
        bob_mcp.call("complete_operation", operation_id=op["operation_id"], external_id="x", external_status="sent"),
        bob_mcp.call("fail_operation", operation_id=op["operation_id"], error="no", retryable=False),
        bob_mcp.call("request_approval", run_id=run_id, action="a", payload={}, reason="r"),
        bob_mcp.call("stop_run", run_id=run_id, reason="completed"),
    ]
    for result in attempts:
        error = refused(result)
        assert error["code"] == "not_found"
        assert "offsite" not in str(result.structured_content).lower() and "12 people" not in str(result.structured_content)
    with pytest.raises(Exception, match="not_found") as prompt_error:
        bob_mcp.prompt(mission_id)
    assert "offsite" not in str(prompt_error.value).lower()
    with pytest.raises(Exception, match="not_found"):
        bob_mcp.resource(mission_id)
    assert Run.objects.get(pk=run_id).ended_at is None  # nothing of Bob's reached it


def test_a_mission_limited_token_sees_only_its_mission(url, token, mcp, connect, alice):
    mission_id = offsite(mcp)
    other = offsite(mcp)
    limited = token_create(user=alice, name="one", mission=Mission.objects.get(pk=mission_id))[1]
    limited_mcp = connect(limited)
    assert [m["mission_id"] for m in ok(limited_mcp.call("list_missions"))["missions"]] == [mission_id]
    assert refused(limited_mcp.call("resume_mission", mission_id=other))["code"] == "not_found"
    assert refused(limited_mcp.call("create_mission", title="t", objective="o"))["code"] == "forbidden"
    assert ok(limited_mcp.call("start_run", mission_id=mission_id))["run_id"]


@pytest.mark.parametrize("header", [None, "Bearer qlt_not-a-real-token", "Basic YWxpY2U6YWxpY2U=", "Token qlt_x"])
def test_a_missing_or_bad_token_gets_401(url, header):
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if header:
        headers["Authorization"] = header
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    answer = httpx.post(url + "/mcp", json=body, headers=headers, timeout=10)
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "unauthenticated"
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")


def test_the_sdk_client_with_a_bad_token_is_refused(url, token, mcp):
    offsite(mcp)
    with pytest.raises(Exception) as refused_at_once:
        with_client(url, "qlt_wrong", lambda client: client.list_tools())
    # The SDK's client reports the server's refusal (the 401 itself is checked above, on the wire).
    assert "Server returned an error response" in repr(refused_at_once.value)


def test_a_revoked_token_gets_401(url, alice):
    from quests.services.tokens import token_revoke

    made, raw = token_create(user=alice, name="soon gone")
    token_revoke(user=alice, token_id=made.pk)
    answer = httpx.post(
        url + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": f"Bearer {raw}", "Accept": "application/json, text/event-stream"},
        timeout=10,
    )
    assert answer.status_code == 401


def test_the_prompt_is_the_briefing_and_the_resource_the_bundle(url, token, mcp, person):
    mission_id = offsite(mcp)
    run_id = started(mcp, mission_id)
    ok(mcp.call("add_record", run_id=run_id, kind="decision", text="Lakeside Lodge: under budget"))
    ok(mcp.call("add_record", run_id=run_id, kind="open_question", text="Vegetarian menu?"))
    go = ok(mcp.call("begin_operation", run_id=run_id, key="hold-lakeside", kind="hold", target="lakeside", request={}))
    ok(mcp.call("complete_operation", operation_id=go["operation_id"], external_id="H-9", external_status="held", receipt={"ref": "H-9"}))
    ok(mcp.call("save_checkpoint", run_id=run_id, agent_state={"next": "invitations"}))
    ok(mcp.call("request_approval", run_id=run_id, action="send the invitations", payload={"to": "team"}, reason="cannot be unsent"))

    text = mcp.prompt(mission_id)
    for expected in (
        "A venue for 12 people.",
        "Never email the client before Friday",
        "Lakeside Lodge: under budget",
        "`hold-lakeside`",
        "H-9",
        "send the invitations",
        "waiting for a person",
        "Vegetarian menu?",
        '"next":"invitations"',
        "## What to do next",
        "await_approval",
    ):
        assert expected in text, expected
    bundle = mcp.resource(mission_id)
    assert bundle["mission_id"] == mission_id and bundle["agent_state"] == {"next": "invitations"}
    assert bundle["next_action"] == "await_approval"
    assert bundle["operations"]["completed"][0]["receipt"] == {"ref": "H-9"}


def test_a_server_stream_is_not_offered_and_an_oversized_body_is_refused(url, token, settings):
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    assert httpx.get(url + "/mcp", headers=headers, timeout=10).status_code == 405
    settings.QUESTLOG_MAX_TOOL_OUTPUT_BYTES = 1000
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"padding": "x" * 2000}}
    answer = httpx.post(url + "/mcp", json=body, headers={**headers, "Accept": "application/json, text/event-stream"}, timeout=10)
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "payload_too_large"


def test_a_tool_call_keeps_to_the_endpoints_body_limit(url, token, mcp, settings):
    run_id = started(mcp, offsite(mcp))
    settings.QUESTLOG_MAX_BODY_BYTES = 2000
    too_big = refused(mcp.call("save_checkpoint", run_id=run_id, agent_state={"notes": "x" * 3000}))
    assert too_big["code"] == "payload_too_large"
    assert ok(mcp.call("add_record", run_id=run_id, kind="tool_output", text="y" * 3000))["kind"] == "tool_output"


def test_the_api_rate_counts_mcp_requests_and_never_refuses_a_receipt(url, token, mcp, settings, monkeypatch):
    run_id = started(mcp, offsite(mcp))
    go = ok(mcp.call("begin_operation", run_id=run_id, key="k", kind="email", target="t", request={}))
    settings.QUESTLOG_API_RATE = 1
    monkeypatch.setattr(throttle, "time", SimpleNamespace(time=lambda: 1_000_000.0))
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}

    def call(name: str, arguments: dict) -> httpx.Response:
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
        return httpx.post(url + "/mcp", json=message, headers=headers, timeout=10)

    assert call("list_missions", {}).status_code == 200
    limited = call("list_missions", {})
    assert limited.status_code == 429 and limited.json()["error"]["code"] == "rate_limited" and limited.headers["Retry-After"]
    receipt = call("complete_operation", {"operation_id": go["operation_id"], "external_id": "m1", "external_status": "sent"})
    assert receipt.status_code == 200 and receipt.json()["result"]["structuredContent"]["status"] == "completed"


def test_a_database_outage_is_the_apis_503_as_a_tool_error():
    def outage():
        raise OperationalError("connection refused")

    with pytest.raises(ApiError) as raised:
        mcp_backend.refused(outage)
    assert raised.value.status == 503 and raised.value.code == "unavailable"
    assert raised.value.error["retry_after"] and "nothing was written" in raised.value.message
    error = refusal(raised.value).structured_content
    assert error == {"error": raised.value.error, "status": 503}
