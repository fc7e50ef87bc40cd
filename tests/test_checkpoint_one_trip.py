"""The agent's checkpoint in one round trip (issue 20): once this process wrote a run's checkpoint, it
keeps the mission as that write left it (`engine.checkpoints.Known`: the row's fingerprint), and
the next checkpoint of the same caller is one autocommit statement that authenticates the token,
counts the request, looks the key up and claims the row only if it is still that one. Whatever
moved it, revoked the token or used the key meanwhile, that statement writes nothing and the
checkpoint goes the two-trip way. Real PostgreSQL, real threads."""

import threading

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from checkpoints.models import Checkpoint
from quests.engine import checkpoints as engine_checkpoints
from quests.models import AgentToken, Mission
from tests.conftest import ApiClient
from tests.test_checkpoint_two_trips import STATE, UNAUTHENTICATED, assert_one_chain, key, post_checkpoint
from tests.test_throttle_count import cache_statements, counted_rate, database_cache  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="the one-statement checkpoint is PostgreSQL's (a claimed write of data-modifying CTEs); SQLite writes every checkpoint under its database lock, "
    "which tests/test_checkpoint_two_trips.py covers (the suite runs on PostgreSQL: these never skip in make test)",
)


def changed(i: int) -> dict:
    return {**STATE, "k00": {"text": f"changed {i}", "n": i}}


def elsewhere(call) -> None:
    """`call` on its own thread and connection: another request, as another worker would send it."""
    thread = threading.Thread(target=lambda: (call(), connection.close()))
    thread.start()
    thread.join()


def statements_of(agent: ApiClient, run_id: int, state: dict, checkpoint_key: str | None = None):
    with CaptureQueriesContext(connection) as captured:
        response = post_checkpoint(agent, run_id, state, checkpoint_key)
    return response, [q["sql"] for q in captured.captured_queries]


@pytest.mark.django_db(transaction=True)
def test_the_next_checkpoint_of_a_run_this_process_wrote_is_one_statement(agent, run):
    """Counted outside any test transaction: what production sends, BEGIN and COMMIT included."""
    engine_checkpoints.known_forget()
    response, statements = statements_of(agent, run["id"], STATE)
    assert response.status_code == 201 and len(statements) == 2
    for i in range(4):
        response, statements = statements_of(agent, run["id"], changed(i))
        assert response.status_code == 201, response.content
        assert len(statements) == 1, statements
        assert "quests_agenttoken" in statements[0]  # authentication rides in the write
    checkpoints = assert_one_chain(run["mission_id"])
    assert len(checkpoints) == 5
    # Each is what the two-trip way writes: its own parts and the same state document.
    assert [c.agent_state_refs.keys() == STATE.keys() for c in checkpoints] == [True] * 5
    assert len({c.hash for c in checkpoints}) == 5
    assert agent.get(f"missions/{run['mission_id']}/resume").json()["checkpoint"]["agent_state"] == changed(3)


@pytest.mark.django_db(transaction=True)
def test_a_record_saved_by_this_process_makes_the_next_checkpoint_read_first_with_its_change(agent, run):
    """A save of the mission's state in this process forgets what it knew of the row: the next
    checkpoint is the two-trip one (no claim bound to fail), with the record's section in it."""
    assert post_checkpoint(agent, run["id"]).status_code == 201
    elsewhere(lambda: agent.post(f"runs/{run['id']}/records", {"kind": "decision", "text": "Lakeside"}))
    response, statements = statements_of(agent, run["id"], changed(1))
    assert response.status_code == 201, response.content
    assert len(statements) == 2  # the read and the claimed write
    checkpoints = assert_one_chain(run["mission_id"])
    mission = Mission.objects.get(pk=run["mission_id"])
    assert checkpoints[-1].state_refs["decisions"] == mission.state_refs["decisions"] != checkpoints[0].state_refs["decisions"]
    _, statements = statements_of(agent, run["id"], changed(2))
    assert len(statements) == 1  # known again


@pytest.mark.django_db(transaction=True)
def test_a_mission_moved_by_another_process_claims_nothing_and_is_written_after_a_read(agent, run):
    """The row moved where this process could not see it (another worker; here its person renames
    the quest): the one statement claims nothing and writes nothing, the checkpoint is written
    after a read, and the other change stays."""
    assert post_checkpoint(agent, run["id"]).status_code == 201
    elsewhere(lambda: Mission.objects.filter(pk=run["mission_id"]).update(title="Renamed by its person"))
    response, statements = statements_of(agent, run["id"], changed(1))
    assert response.status_code == 201, response.content
    assert len(statements) == 3  # the one statement, then the read and the claimed write
    assert len(assert_one_chain(run["mission_id"])) == 2
    assert Mission.objects.get(pk=run["mission_id"]).title == "Renamed by its person"
    _, statements = statements_of(agent, run["id"], changed(2))
    assert len(statements) == 1  # known again


@pytest.mark.django_db(transaction=True)
def test_a_token_revoked_since_the_last_checkpoint_is_401_and_nothing_is_written(agent, run):
    assert post_checkpoint(agent, run["id"]).status_code == 201
    AgentToken.objects.update(revoked_at=timezone.now())
    response = post_checkpoint(agent, run["id"], changed(1))
    assert (response.status_code, response.json()) == (401, UNAUTHENTICATED)
    assert len(assert_one_chain(run["mission_id"])) == 1


@pytest.mark.django_db(transaction=True)
def test_a_stopped_run_is_refused_and_nothing_is_written(agent, run):
    assert post_checkpoint(agent, run["id"]).status_code == 201
    elsewhere(lambda: agent.post(f"runs/{run['id']}/stop", {"reason": "completed"}))
    stopped = len(assert_one_chain(run["mission_id"]))  # with the stop's own checkpoint
    response = post_checkpoint(agent, run["id"], changed(1))
    assert response.status_code == 409 and response.json()["error"]["code"] == "run_ended"
    assert len(assert_one_chain(run["mission_id"])) == stopped


@pytest.mark.django_db(transaction=True)
def test_a_key_used_meanwhile_replays_and_a_key_reused_for_other_state_is_refused(agent, run):
    first = post_checkpoint(agent, run["id"], checkpoint_key="k-1")
    again = post_checkpoint(agent, run["id"], checkpoint_key="k-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json() == again.json()
    assert post_checkpoint(agent, run["id"], changed(1), checkpoint_key="k-2").status_code == 201
    other = post_checkpoint(agent, run["id"], changed(2), checkpoint_key="k-2")
    assert other.status_code == 409 and other.json()["error"]["code"] == "key_reuse"
    assert len(assert_one_chain(run["mission_id"])) == 2


@pytest.mark.django_db(transaction=True)
def test_another_token_of_the_same_person_does_not_use_what_this_one_wrote(agent, alice, run):
    from quests.services.tokens import token_create

    assert post_checkpoint(agent, run["id"]).status_code == 201
    _, raw = token_create(user=alice, name="second")
    second = ApiClient(Client(), raw)
    response, statements = statements_of(second, run["id"], changed(1))
    assert response.status_code == 201 and len(statements) == 2  # read first: its own caller
    assert len(assert_one_chain(run["mission_id"])) == 2
    response, statements = statements_of(agent, run["id"], changed(2))
    assert response.status_code == 201 and len(statements) == 3  # the row moved under the first
    assert len(assert_one_chain(run["mission_id"])) == 3


@pytest.mark.django_db(transaction=True)
def test_one_statement_counts_the_request_and_past_the_rate_writes_nothing(agent, run, counted_rate):  # noqa: F811
    path = f"runs/{run['id']}/checkpoints"
    assert agent.post(path, {"agent_state": {"step": 0}, "key": key()}).status_code == 201
    for step in range(1, counted_rate):
        with CaptureQueriesContext(connection) as captured:
            assert agent.post(path, {"agent_state": {"step": step}, "key": key()}).status_code == 201
        assert len(captured) == 1
        (statement,) = cache_statements(captured)
        assert "quests_agenttoken" in statement and "checkpoints_checkpoint" in statement
    refused = agent.post(path, {"agent_state": {"step": 9}, "key": key()})
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert Checkpoint.objects.filter(mission_id=run["mission_id"]).count() == counted_rate
    with connection.cursor() as cursor:
        cursor.execute("SELECT value FROM questlog_cache")
        assert cursor.fetchall() == [(str(counted_rate + 1),)]  # each request counted once


@pytest.mark.django_db(transaction=True)
def test_two_workers_of_one_token_checkpointing_one_run_at_once_keep_one_chain(agent, run):
    """Two threads of this process share what it knows of the run (one token, one run): each takes
    it out while it writes, so neither writes on a row the other moved; all land, in one chain."""
    from tests.test_concurrency import agents_like, race

    assert post_checkpoint(agent, run["id"]).status_code == 201
    rounds = 10
    answers = race(
        agents_like(agent, 2),
        lambda client, i: [post_checkpoint(client, run["id"], {**STATE, "k00": {"text": f"{i}-{n}", "n": n}}) for n in range(rounds)][-1],
    )
    assert [a.status for a in answers] == [201, 201]
    assert len(assert_one_chain(run["mission_id"])) == 1 + 2 * rounds


def test_the_map_of_what_this_process_wrote_is_bounded_and_forgets_a_mission_whose_state_it_saved(monkeypatch):
    """Unit test of `engine.checkpoints`' map: the oldest entry goes first past KNOWN_LIMIT, an entry
    is taken out when used, and a save of a mission's state forgets every entry of that mission."""
    from types import SimpleNamespace

    from quests.engine.writes import Caller, Credentials

    def known(mission_id: int) -> engine_checkpoints.Known:
        seen = SimpleNamespace(locked=SimpleNamespace(mission=SimpleNamespace(pk=mission_id)))
        return engine_checkpoints.Known(seen=seen, mission_after=f"m{mission_id}")  # type: ignore[arg-type]

    engine_checkpoints.known_forget()
    monkeypatch.setattr(engine_checkpoints, "KNOWN_LIMIT", 3)
    token, user = Credentials(token_hash="h"), Caller(user_id=7)
    for run_id in (1, 2, 3, 4):
        engine_checkpoints.known_keep(token, run_id, known(10 + run_id))
    assert engine_checkpoints.known_take(token, 1) is None  # the oldest went first
    assert engine_checkpoints.known_take(token, 2).mission_after == "m12"
    assert engine_checkpoints.known_take(token, 2) is None  # taken out while used
    assert engine_checkpoints.known_take(user, 3) is None  # another caller's
    engine_checkpoints.known_keep(user, 5, known(13))
    engine_checkpoints.known_moved(13)
    assert engine_checkpoints.known_take(token, 3) is None and engine_checkpoints.known_take(user, 5) is None
    assert engine_checkpoints.known_take(token, 4).mission_after == "m14"
    engine_checkpoints.known_forget()
