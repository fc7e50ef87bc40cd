"""questlog_client against a live server: typed answers, runs with heartbeats, the safe path for
side effects, one exception class per error code, and retries only where they are safe."""

import threading
import time

import httpx
import pytest

from questlog_client import (
    ApprovalRequested,
    Bundle,
    EffectFailed,
    Forbidden,
    InvalidInput,
    InvalidTransition,
    KeyReuse,
    MissionNotStartable,
    NotFound,
    Outcome,
    PayloadTooLarge,
    Questlog,
    ReconcileNeeded,
    RetryBudgetExhausted,
    RunActive,
    RunEnded,
    ServerError,
    TransportError,
    Unauthenticated,
)
from questlog_client.errors import OperationFailed
from questlog_client.fake_service import FakeService
from questlog_client.testing import PersonSession
from quests.services.tokens import token_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def short_heartbeat(settings):
    settings.QUESTLOG_HEARTBEAT_TIMEOUT = 1


@pytest.fixture
def token(alice) -> str:
    return token_create(user=alice, name="client-test")[1]


@pytest.fixture
def ql(live_server, token):
    with Questlog(live_server.url, token, heartbeat_interval=0.2, poll_interval=0.05, backoff=0.01) as client:
        yield client


@pytest.fixture
def alice_in_browser(live_server, alice):
    session = PersonSession(live_server.url, "alice", "alice-password")
    yield session
    session.close()


@pytest.fixture
def service(tmp_path) -> FakeService:
    return FakeService(tmp_path / "service.sqlite3")


def offsite(ql: Questlog, **extra):
    return ql.missions.create(
        "Book the offsite",
        "Find and book a venue for 12 people.",
        constraints=["Never email the client before Friday"],
        planned_milestones=[("research_complete", "Research"), ("plan_approved", "Plan")],
        **extra,
    )


def test_it_creates_and_gets_missions_as_typed_objects(ql):
    mission = offsite(ql)
    again = ql.missions.get(mission.id)
    assert again.id == mission.id and again.status == "ready"
    assert again.info.progress.planned == 2 and again.info.created_at is not None
    assert [m.id for m in ql.missions.list()] == [mission.id]
    bundle = mission.resume()
    assert isinstance(bundle, Bundle)
    assert bundle.next_action == "resume"
    assert [c.text for c in bundle.constraints] == ["Never email the client before Friday"]
    assert bundle.agent_state == {}


def test_a_run_started_in_a_with_block_completes_the_mission_when_the_block_ends(ql):
    mission = offsite(ql)
    with mission.start_run(agent="tester") as run:
        assert run.bundle.next_action == "resume"
        decision = run.record("decision", "Use Lakeside", key="venue")
        run.checkpoint({"step": 2, "venue": "Lakeside"}, key="cp-1")
    assert run.ended and run.stop_reason == "completed"
    assert mission.refresh().status == "completed"
    assert decision.kind == "decision" and decision.id > 0


def test_the_heartbeat_keeps_a_quiet_run_alive_past_the_timeout(ql, settings):
    settings.QUESTLOG_HEARTBEAT_TIMEOUT = 2  # ten beats per timeout: a slow machine still keeps up
    mission = offsite(ql)
    with mission.start_run(agent="slow thinker") as run:
        time.sleep(4.5)  # more than twice the heartbeat timeout without a single write
        with pytest.raises(RunActive):
            mission.start_run(agent="intruder")
        run.record("note", "still here")
    assert run.stop_reason == "completed"


def test_a_fresh_process_takes_over_once_the_crashed_runs_heartbeat_lapses(ql, short_heartbeat):
    mission = offsite(ql)
    crashed = mission.start_run(agent="crashed", heartbeat_interval=0)  # never beats, like a killed process
    crashed.record("decision", "Use Lakeside", key="venue")
    started = time.monotonic()
    with mission.start_run(agent="fresh", takeover_timeout=10) as run:
        assert time.monotonic() - started >= 0.5
        assert [d.text for d in run.bundle.decisions] == ["Use Lakeside"]
        with pytest.raises(RunEnded) as ended:
            crashed.record("note", "zombie write")
        assert ended.value.stop_reason == "interrupted"
    assert crashed.ended


def test_a_persons_pause_arriving_mid_run_raises_run_ended_with_paused_by_user(ql, alice_in_browser):
    mission = offsite(ql)
    with pytest.raises(RunEnded) as ended:
        with mission.start_run(agent="tester") as run:
            run.record("decision", "Use Lakeside", key="venue")
            alice_in_browser.pause(mission.id)
            run.record("note", "this write comes after the pause")
    assert ended.value.stop_reason == "paused_by_user"
    assert ended.value.status == 409 and ended.value.code == "run_ended"
    assert run.ended and run.stop_reason == "paused_by_user"
    assert mission.refresh().status == "paused"  # leaving the block did not overwrite the person's pause
    assert mission.resume().next_action == "await_user"


def test_the_heartbeat_notices_a_pause_even_when_the_agent_writes_nothing(ql, alice_in_browser):
    mission = offsite(ql)
    with mission.start_run(agent="tester") as run:
        alice_in_browser.pause(mission.id)
        deadline = time.monotonic() + 5
        while not run.ended and time.monotonic() < deadline:
            time.sleep(0.05)
        assert run.ended and run.stop_reason == "paused_by_user"


def test_an_operation_runs_its_side_effect_once_and_returns_the_stored_receipt_on_resume(ql, service):
    mission = offsite(ql)
    request = {"to": "team@example.com", "subject": "Offsite"}
    with mission.start_run(agent="first") as run:
        first = run.operation("invite", kind="email.send", target="team@example.com", request=request, reconcile=service.lookup)(
            service.effect("email.send", "team@example.com", request, status="sent")
        )
        run.stop("blocked_external", "mail server slow")
    assert not first.replayed and first.external_status == "sent" and first.operation.status == "completed"
    with mission.start_run(agent="second") as run:
        assert [op.key for op in run.bundle.operations.completed] == ["invite"]
        again = run.operation("invite", kind="email.send", target="team@example.com", request=request)(
            lambda op: pytest.fail("the side effect ran a second time")
        )
        bounced = run.observe(again.operation, "bounced", receipt={"reason": "mailbox full"})
    assert again.replayed and again.external_id == first.external_id
    assert bounced.external_status == "bounced" and bounced.status == "completed"
    assert len(service.calls()) == 1


def test_an_unconfirmed_attempt_that_happened_is_reconciled_instead_of_repeated(ql, service, short_heartbeat):
    mission = offsite(ql)
    request = {"venue": "Lakeside"}
    crashed = mission.start_run(agent="crashed", heartbeat_interval=0)
    op = crashed.operation("hold", kind="reservation.hold", target="lakeside", request=request)
    planned = op.plan()
    ql.request("POST", f"operations/{planned.id}/attempt")
    service.call("reservation.hold", "lakeside", request, ref=f"questlog-op-{planned.id}", status="held")  # then the process died
    with mission.start_run(agent="fresh", takeover_timeout=10) as run:
        assert run.bundle.next_action == "reconcile"
        assert [o.key for o in run.bundle.operations.to_reconcile] == ["hold"]
        receipt = run.operation("hold", kind="reservation.hold", target="lakeside", request=request, reconcile=service.lookup)(
            lambda op: pytest.fail("repeated a side effect that had happened")
        )
    assert receipt.reconciled and receipt.external_status == "held" and receipt.operation.status == "completed"
    assert len(service.calls()) == 1


def test_an_unconfirmed_attempt_that_never_happened_is_attempted_again(ql, service, short_heartbeat):
    mission = offsite(ql)
    request = {"venue": "Lakeside"}
    crashed = mission.start_run(agent="crashed", heartbeat_interval=0)
    planned = crashed.operation("hold", kind="reservation.hold", target="lakeside", request=request).plan()
    ql.request("POST", f"operations/{planned.id}/attempt")  # the process died before the call went out
    with mission.start_run(agent="fresh", takeover_timeout=10) as run:
        receipt = run.operation("hold", kind="reservation.hold", target="lakeside", request=request, reconcile=service.lookup)(
            service.effect("reservation.hold", "lakeside", request, status="held")
        )
    assert not receipt.reconciled and receipt.operation.attempts == 2
    assert len(service.calls()) == 1


def test_without_a_reconcile_hook_an_unconfirmed_attempt_is_refused(ql, short_heartbeat):
    mission = offsite(ql)
    crashed = mission.start_run(agent="crashed", heartbeat_interval=0)
    planned = crashed.operation("hold", kind="reservation.hold", target="lakeside", request={}).plan()
    ql.request("POST", f"operations/{planned.id}/attempt")
    with pytest.raises(ReconcileNeeded) as refused:
        with mission.start_run(agent="fresh", takeover_timeout=10) as run:
            run.operation("hold", kind="reservation.hold", target="lakeside", request={})(lambda op: pytest.fail("blind repeat"))
    assert refused.value.operation.key == "hold"
    assert mission.refresh().status == "blocked"  # the error stopped the run so the next one can start at once


def test_an_effect_that_certainly_failed_is_recorded_and_may_be_retried(ql, service):
    mission = offsite(ql)

    def unavailable(op):
        raise EffectFailed("503 from the booking system", retryable=True)

    with mission.start_run(agent="tester") as run:
        with pytest.raises(OperationFailed):
            run.operation("hold", kind="reservation.hold", target="lakeside", request={})(unavailable)
        assert run.refresh_bundle().operation("hold").status == "failed"
        receipt = run.operation("hold", kind="reservation.hold", target="lakeside", request={})(
            service.effect("reservation.hold", "lakeside", {}, status="held")
        )
    assert receipt.operation.status == "completed" and receipt.operation.attempts == 2


def test_the_retry_budget_is_a_typed_error(ql):
    mission = offsite(ql)

    def unavailable(op):
        raise EffectFailed("still down", retryable=True)

    with mission.start_run(agent="tester") as run:
        call = run.operation("hold", kind="reservation.hold", target="lakeside", request={}, max_attempts=1)
        with pytest.raises(OperationFailed):
            call(unavailable)
        with pytest.raises(RetryBudgetExhausted):
            call(unavailable)
        run.stop("failed_retry_budget", "The booking system kept failing.")
    assert mission.refresh().status == "failed"


def test_requesting_an_approval_ends_the_run_and_the_next_run_finds_the_decision(ql, alice_in_browser):
    mission = offsite(ql)
    with mission.start_run(agent="tester") as run:
        asked = run.request_approval("send the contract", {"to": "client"}, "It cannot be unsent.", agent_state={"phase": "send"}, key="send")
        assert isinstance(asked, ApprovalRequested)
        assert asked.run_ended and asked.stop_reason == "waiting_for_approval" and asked.approval.status == "pending"
        assert run.ended
        with pytest.raises(RunEnded):
            run.record("note", "after the request")
    with pytest.raises(MissionNotStartable) as refused:
        mission.start_run(agent="impatient")
    assert refused.value.mission_status == "waiting_for_approval"

    waiting = threading.Event()

    def approve_once_the_agent_waits():
        assert waiting.wait(timeout=30), "the agent never started waiting"
        alice_in_browser.decide_approval(asked.approval.id, "edit", payload={"to": "client", "cc": "boss"}, note="cc my boss")

    def on_wait(bundle: Bundle) -> None:
        waited.append(bundle.next_action)
        waiting.set()

    person = threading.Thread(target=approve_once_the_agent_waits)
    person.start()
    waited: list[str] = []
    bundle = mission.wait_for_person(on_wait=on_wait, timeout=60)
    person.join()
    assert waited and set(waited) == {"await_approval"}
    assert bundle.next_action == "resume"
    with mission.start_run(agent="tester") as run:
        assert run.bundle.agent_state == {"phase": "send"}
        approval = run.bundle.approval("send the contract")
        assert approval.granted and approval.decided_payload == {"to": "client", "cc": "boss"} and approval.note == "cc my boss"
        replay = run.request_approval("send the contract", {"to": "client"}, "It cannot be unsent.", agent_state={"phase": "send"}, key="send")
        assert not replay.run_ended and replay.approval.status == "edited"
        run.record("note", "the run goes on after a replayed request")


def test_a_gate_milestone_ends_the_run_until_a_person_reviews_it(ql, alice_in_browser):
    mission = offsite(ql)
    with mission.start_run(agent="tester") as run:
        evidence = run.record("evidence", "Three quotes")
        plain = run.milestone("research_complete", "Research", evidence=[evidence.id], key="research")
        assert not plain.run_ended and not run.ended
        gate = run.milestone("plan_approved", "Plan", summary="Lakeside", gate=True, agent_state={"phase": "book"}, key="plan")
        assert gate.run_ended and run.stop_reason == "waiting_for_approval"
    assert mission.resume().next_action == "await_approval"
    alice_in_browser.review_milestone(gate.milestone.id, "approve")
    with mission.start_run(agent="tester") as run:
        assert run.bundle.milestone("plan_approved").review_status == "approved"
        assert run.bundle.last_verified_checkpoint is not None
        memory = run.propose_memory("Venues", "Prefers lakeside venues", "It came up twice.", key="mem")
        assert memory.status == "pending"


def test_an_exception_in_the_block_stops_the_run_blocked_with_the_error_as_detail(ql):
    mission = offsite(ql)
    with pytest.raises(ZeroDivisionError):
        with mission.start_run(agent="tester"):
            raise ZeroDivisionError("the agent's own code failed")
    info = mission.refresh()
    assert info.status == "blocked" and info.stop_reason == "blocked_external"
    assert "ZeroDivisionError" in info.stop_detail
    with mission.start_run(agent="tester") as run:  # blocked is startable: no waiting for a heartbeat
        assert run.bundle.mission.stop_reason == "blocked_external"


def test_each_error_code_has_its_own_exception_class(ql, live_server, alice):
    mission = offsite(ql)
    with pytest.raises(Unauthenticated):
        Questlog(live_server.url, "qlt_not-a-token").missions.list()
    with pytest.raises(NotFound):
        ql.missions.get(mission.id + 1000)
    with pytest.raises(InvalidInput) as invalid:
        ql.missions.create("", "objective")
    assert invalid.value.field == "title"
    with pytest.raises(KeyReuse) as reused:
        offsite(ql, key="same")
        ql.missions.create("Another title", "Another objective", key="same")
    assert reused.value.key == "same"
    scoped = token_create(user=alice, name="scoped", mission=_model(mission.id))[1]
    with pytest.raises(Forbidden):
        Questlog(live_server.url, scoped).missions.create("Not allowed", "A scoped token creates no missions.")
    with mission.start_run(agent="tester") as run:
        with pytest.raises(RunActive) as active:
            mission.start_run(agent="second")
        assert active.value.run_id == run.id
        with pytest.raises(PayloadTooLarge):
            run.record("note", "x" * (1024 * 1024 + 1))
        receipt = run.operation("once", kind="k", target="t", request={})(lambda op: Outcome("X-1", "done"))
        with pytest.raises(InvalidTransition):
            ql.request("POST", f"operations/{receipt.operation.id}/attempt")


def _model(mission_id: int):
    from quests.models import Mission

    return Mission.objects.get(pk=mission_id)


class Flaky(httpx.BaseTransport):
    """Answers 503 to the first `failures` requests that match, then forwards to the real server."""

    def __init__(self, failures: int, path_part: str) -> None:
        self.failures = failures
        self.path_part = path_part
        self.seen: list[str] = []
        self.real = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(f"{request.method} {request.url.path}")
        if self.path_part in request.url.path and self.failures > 0:
            self.failures -= 1
            return httpx.Response(503, json={"error": {"code": "unavailable", "message": "try later"}})
        return self.real.handle_request(request)


def test_idempotent_calls_are_retried_after_a_5xx(live_server, token):
    flaky = Flaky(2, "/records")
    with Questlog(live_server.url, token, transport=flaky, backoff=0.01, heartbeat_interval=0) as client:
        mission = offsite(client)
        with mission.start_run(agent="tester") as run:
            record = run.record("decision", "Use Lakeside")  # keyed by the client, so a retry replays it
            assert run.refresh_bundle().decisions[0].id == record.id
            assert len(run.bundle.decisions) == 1
    assert sum("/records" in line for line in flaky.seen) == 3


def test_an_attempt_is_never_retried_because_the_first_may_have_happened(live_server, token):
    flaky = Flaky(1, "/attempt")
    with Questlog(live_server.url, token, transport=flaky, backoff=0.01, heartbeat_interval=0) as client:
        mission = offsite(client)
        with mission.start_run(agent="tester") as run:
            with pytest.raises(ServerError):
                run.operation("hold", kind="k", target="t", request={})(lambda op: pytest.fail("ran after a failed attempt"))
            run.stop("blocked_external", "booking system down")
    assert sum("/attempt" in line for line in flaky.seen) == 1


def test_a_call_goes_out_as_json_with_the_token_and_its_answer_comes_back_decoded():
    """The connection hands its requests to the transport itself (no httpx.Client in between):
    the base URL, the token, the JSON body and the timeout are all on the request sent."""
    sent: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(201, json={"id": 7, "title": "Café ☕"})

    from questlog_client.core import Connection

    connection = Connection("http://questlog.test/", "qlt_secret", transport=httpx.MockTransport(server), timeout=12)
    assert connection.request("POST", "missions", {"title": "Café ☕", "n": [1, 2.5, None]}) == (201, {"id": 7, "title": "Café ☕"})
    assert connection.request("GET", "missions?limit=2")[0] == 201
    post, get = sent
    assert (post.method, str(post.url)) == ("POST", "http://questlog.test/api/v1/missions")
    assert post.headers["authorization"] == "Bearer qlt_secret" and post.headers["content-type"] == "application/json"
    assert post.headers["accept"] == "application/json" and post.headers["user-agent"] == "questlog-client"
    assert post.content == '{"title":"Café ☕","n":[1,2.5,null]}'.encode()
    assert post.extensions["timeout"] == {"connect": 12, "read": 12, "write": 12, "pool": 12}
    assert (get.method, get.url.path, get.url.query, get.content) == ("GET", "/api/v1/missions", b"limit=2", b"")
    with pytest.raises(ValueError):
        connection.request("POST", "missions", {"score": float("nan")})  # not JSON: refused before sending
    assert len(sent) == 2
    connection.close()


def test_a_body_is_the_json_httpx_would_send_and_what_json_refuses_is_still_refused():
    """Bodies are written by orjson when it writes the value json would, else by json as httpx does:
    the same text for plain values, and the same refusal (or the same text) for the rest."""
    import dataclasses
    import datetime
    import enum
    import json
    import uuid

    from questlog_client.core import json_body

    class Kind(enum.Enum):
        EMAIL = "email"

    class Tier(enum.IntEnum):
        GOLD = 1

    class Named(enum.StrEnum):
        LAKESIDE = "lakeside"

    @dataclasses.dataclass
    class Venue:
        name: str

    def as_httpx(value):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()

    plain = {"agent_state": {"é": "Café ☕", "n": [1, 2.5, -0.0, None, True], "deep": [[{"x": 10**18}]]}, "key": "k"}
    assert json_body(plain) == as_httpx(plain)
    # Written by json as before, to the same text: what orjson writes otherwise or refuses.
    for value in ({"t": (1, 2)}, {"k": {1: "one"}}, {"big": 2**70}, {"tier": Tier.GOLD}, {"venue": Named.LAKESIDE}):
        assert json.loads(json_body(value)) == json.loads(as_httpx(value)), value
    # Refused as before, not sent as null or as a string.
    for value in ({"x": float("nan")}, {"x": [float("inf")]}):
        with pytest.raises(ValueError):
            json_body(value)
    for value in ({"id": uuid.uuid4()}, {"kind": Kind.EMAIL}, {"at": datetime.datetime.now()}, {"venue": Venue("Lakeside")}):
        with pytest.raises(TypeError):
            json_body(value)


def test_connection_errors_surface_as_transport_errors_after_the_retries(token):
    with Questlog("http://127.0.0.1:9", token, retries=1, backoff=0.01) as client:
        with pytest.raises(TransportError):
            client.missions.list()


def test_the_fake_service_records_every_call_durably_and_answers_lookups(tmp_path):
    path = tmp_path / "service.sqlite3"
    service = FakeService(path)
    first = service.call("email.send", "team@example.com", {"subject": "hi"}, ref="questlog-op-7", status="sent")
    service.call("email.send", "team@example.com", {"subject": "hi"})
    reopened = FakeService(path)
    assert [c.external_id for c in reopened.calls()] == [first.external_id, "EMAIL-00002"]
    assert reopened.effects()[("email.send", "team@example.com", '{"subject":"hi"}')] == 2

    class Op:
        id = 7

    assert reopened.lookup(Op()).external_id == first.external_id
    Op.id = 8
    assert reopened.lookup(Op()) is None
