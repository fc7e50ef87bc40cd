"""The agent's checkpoint in two round trips (issue 20): one autocommit read that authenticates the
token and reads the run, its mission, the key and the head without a lock; one autocommit write
that lands only if the mission row is still as read, else the locked path writes it. (Once this
process wrote a run's checkpoint, the next is one statement: tests/test_checkpoint_one_trip.py.) Races are
run for real, with threads and their own connections, on PostgreSQL."""

import threading
import uuid
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from checkpoints.models import Checkpoint
from quests.engine import checkpoints as engine_checkpoints
from quests.models import AgentToken, Mission
from quests.services import throttle
from quests.services.tokens import token_create
from tests.conftest import ApiClient
from tests.test_concurrency import agents_like, race

STATE = {f"k{i:02d}": {"text": "x" * 200, "n": i} for i in range(10)}
UNAUTHENTICATED = {"error": {"code": "unauthenticated", "message": "Send a valid agent token (Authorization: Bearer …) or sign in."}}
postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="SQLite serialises writers, so the compare-and-set race exists only on PostgreSQL (the suite runs on PostgreSQL; the SQLite run of the engine tests skips these)",
)


def key() -> str:
    return uuid.uuid4().hex


def post_checkpoint(agent: ApiClient, run_id: int, state=STATE, checkpoint_key: str | None = None):
    return agent.post(f"runs/{run_id}/checkpoints", {"agent_state": state, "key": checkpoint_key or key()})


def assert_one_chain(mission_id: int) -> list[Checkpoint]:
    """The mission's checkpoints are one chain: seqs 1..n, each the child of the one before, the
    head the last one, the next seq after it."""
    checkpoints = list(Checkpoint.objects.filter(mission_id=mission_id).order_by("seq"))
    assert [c.seq for c in checkpoints] == list(range(1, len(checkpoints) + 1))
    for parent, child in zip(checkpoints, checkpoints[1:]):
        assert child.parent_id == parent.pk
    mission = Mission.objects.get(pk=mission_id)
    assert mission.head_checkpoint_id == checkpoints[-1].pk
    assert mission.next_checkpoint_seq == checkpoints[-1].seq + 1
    return checkpoints


def then_a_record_lands(read, agent: ApiClient, run_id: int):
    """`read` (a fast path's unlocked read), after which another request records a decision on the
    run, on its own connection: the mission row moves between the read and the write."""

    def read_then_someone_writes(*args, **kwargs):
        seen = read(*args, **kwargs)
        other = threading.Thread(target=lambda: (agent.post(f"runs/{run_id}/records", {"kind": "decision", "text": "Lakeside"}), connection.close()))
        other.start()
        other.join()
        return seen

    return read_then_someone_writes


# --- Two statements, authentication included -----------------------------------------------------


@pytest.mark.django_db(transaction=True)
@postgresql_only
def test_an_agent_checkpoint_is_two_statements_in_all_with_no_transaction(agent, run):
    """Counted outside any test transaction: what production sends, BEGIN and COMMIT included.
    Each checkpoint here is the first this process writes for the run (after that it is one
    statement: tests/test_checkpoint_one_trip.py)."""
    post_checkpoint(agent, run["id"])
    for i in range(3):
        engine_checkpoints.known_forget()
        with CaptureQueriesContext(connection) as captured:
            response = post_checkpoint(agent, run["id"], {**STATE, "k00": {"text": f"changed {i}", "n": i}})
        assert response.status_code == 201, response.content
        statements = [q["sql"] for q in captured.captured_queries]
        assert len(statements) == 2, statements
        assert "quests_agenttoken" in statements[0]  # authentication rides in the read
    assert_one_chain(run["mission_id"])


@pytest.mark.django_db
def test_the_token_s_last_use_is_noted_in_the_write_once_a_minute(agent, run):
    token = AgentToken.objects.get()
    AgentToken.objects.update(last_used_at=timezone.now() - timedelta(minutes=2))
    with CaptureQueriesContext(connection) as captured:
        assert post_checkpoint(agent, run["id"]).status_code == 201
    if connection.vendor == "postgresql":
        assert len(captured.captured_queries) == 2
    noted = AgentToken.objects.get(pk=token.pk).last_used_at
    assert noted > timezone.now() - timedelta(seconds=30)
    assert post_checkpoint(agent, run["id"]).status_code == 201
    assert AgentToken.objects.get(pk=token.pk).last_used_at == noted  # not again within the minute


@pytest.mark.django_db
def test_a_token_that_is_not_valid_is_401_and_nothing_is_written(agent, alice, run):
    before = Checkpoint.objects.count()
    for headers in ({"HTTP_AUTHORIZATION": "Bearer qlt_made-up"}, {"HTTP_AUTHORIZATION": "Bearer "}, {"HTTP_AUTHORIZATION": "Basic abc"}):
        caller = ApiClient(Client())
        caller.headers = headers
        response = post_checkpoint(caller, run["id"])
        assert (response.status_code, response.json()) == (401, UNAUTHENTICATED), headers
    AgentToken.objects.update(revoked_at=timezone.now())
    response = post_checkpoint(agent, run["id"])
    assert (response.status_code, response.json()) == (401, UNAUTHENTICATED)
    AgentToken.objects.update(revoked_at=None)
    alice.is_active = False
    alice.save()
    response = post_checkpoint(agent, run["id"])
    assert (response.status_code, response.json()) == (401, UNAUTHENTICATED)
    assert Checkpoint.objects.count() == before


@pytest.mark.django_db
def test_a_token_limited_to_another_mission_or_of_another_user_is_404(agent, alice, bob_agent, run):
    other = Mission.objects.get(pk=run["mission_id"])
    limited_to = agent.post("missions", {"title": "Another", "objective": "Something else."}).json()
    _, raw = token_create(user=alice, name="limited", mission=Mission.objects.get(pk=limited_to["id"]))
    for caller in (ApiClient(Client(), raw), bob_agent):
        response = post_checkpoint(caller, run["id"])
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert not Checkpoint.objects.filter(mission=other).exists()


@pytest.mark.django_db
def test_a_bad_body_with_a_bad_token_is_401_and_with_a_good_one_is_about_the_body(agent, run):
    caller = ApiClient(Client(), "qlt_made-up")
    assert caller.post(f"runs/{run['id']}/checkpoints", raw="{not json").status_code == 401
    assert caller.post(f"runs/{run['id']}/checkpoints", {"agent_state": "not an object"}).status_code == 401
    assert agent.post(f"runs/{run['id']}/checkpoints", raw="{not json").status_code == 400
    assert agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": "not an object"}).status_code == 422


@pytest.mark.django_db
def test_every_checkpoint_is_counted_against_the_token_s_rate(agent, run, settings, monkeypatch):
    monkeypatch.setattr(throttle, "time", SimpleNamespace(time=lambda: 60 * 30_000_000 + 45.0))
    settings.QUESTLOG_API_RATE = 2
    assert post_checkpoint(agent, run["id"]).status_code == 201
    assert agent.post(f"runs/{run['id']}/checkpoints", raw="{not json").status_code == 400  # counted too
    response = post_checkpoint(agent, run["id"])
    assert response.status_code == 429 and response.json()["error"]["code"] == "rate_limited"


# --- Fencing and replay, as before ------------------------------------------------------------------


@pytest.mark.django_db
def test_a_stopped_run_s_checkpoint_is_refused(agent, run):
    assert post_checkpoint(agent, run["id"]).status_code == 201
    agent.post(f"runs/{run['id']}/stop", {"reason": "completed"})
    before = Checkpoint.objects.filter(mission_id=run["mission_id"]).count()
    response = post_checkpoint(agent, run["id"])
    assert response.status_code == 409 and response.json()["error"]["code"] == "run_ended"
    assert Checkpoint.objects.filter(mission_id=run["mission_id"]).count() == before


@pytest.mark.django_db
def test_the_same_key_replays_the_same_checkpoint(agent, run):
    first = post_checkpoint(agent, run["id"], checkpoint_key="k-1")
    again = post_checkpoint(agent, run["id"], checkpoint_key="k-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json() == again.json()
    other = post_checkpoint(agent, run["id"], {"changed": True}, checkpoint_key="k-1")
    assert other.status_code == 409 and other.json()["error"]["code"] == "key_reuse"
    assert Checkpoint.objects.filter(mission_id=run["mission_id"]).count() == 1


# --- Races, for real --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@postgresql_only
def test_two_writers_on_one_mission_at_once_both_land(agent, run):
    """Two workers of one agent checkpoint the same run in a loop at once: every checkpoint lands
    (the one whose mission moved under it takes the locked path), seqs stay one chain."""
    rounds = 8
    answers = race(
        agents_like(agent, 2),
        lambda client, i: [post_checkpoint(client, run["id"], {**STATE, "k00": {"text": f"{i}-{n}", "n": n}}) for n in range(rounds)][-1],
    )
    assert [a.status for a in answers] == [201, 201]
    checkpoints = assert_one_chain(run["mission_id"])
    assert len(checkpoints) == 2 * rounds
    assert {c.note for c in checkpoints} == {""}


@pytest.mark.django_db(transaction=True)
@postgresql_only
def test_a_key_raced_by_two_threads_makes_one_checkpoint(agent, run):
    for attempt in range(3):
        shared = f"raced-{attempt}"
        answers = race(agents_like(agent, 2), lambda client, i: post_checkpoint(client, run["id"], checkpoint_key=shared))
        assert sorted(a.status for a in answers) == [200, 201]
        assert answers[0].body["id"] == answers[1].body["id"]
    assert len(assert_one_chain(run["mission_id"])) == 3


@pytest.mark.django_db(transaction=True)
@postgresql_only
def test_a_write_whose_mission_moved_after_the_read_takes_the_locked_path(agent, run, monkeypatch):
    """A record lands between the checkpoint's read and its write: the compare-and-set claims
    nothing, nothing of the first attempt is written, and the locked path writes the checkpoint
    with the record's section in it."""
    assert post_checkpoint(agent, run["id"]).status_code == 201
    engine_checkpoints.known_forget()  # this checkpoint reads first
    monkeypatch.setattr(engine_checkpoints, "checkpoint_read", then_a_record_lands(engine_checkpoints.checkpoint_read, agent, run["id"]))
    with CaptureQueriesContext(connection) as captured:
        response = post_checkpoint(agent, run["id"], {**STATE, "k01": "changed"})
    assert response.status_code == 201, response.content
    assert any("FOR UPDATE OF m" in q["sql"] for q in captured.captured_queries)  # the locked path wrote it
    checkpoints = assert_one_chain(run["mission_id"])
    assert len(checkpoints) == 2
    mission = Mission.objects.get(pk=run["mission_id"])
    assert checkpoints[-1].state_refs["decisions"] == mission.state_refs["decisions"] != checkpoints[0].state_refs["decisions"]


def test_the_key_s_body_hash_made_from_the_parts_is_the_body_s():
    """The checkpoint serialises its state once: the key's request hash is made from the parts'
    canonical JSON, and must equal the hash of the body itself (keys remembered before stay valid)."""
    from quests.services import checkpointing, idempotency, records

    for state, note in ((STATE, ""), ({"é": [1, 2.5, None, True], "a": {"z": "ü", "b": []}}, "a note"), ({}, "")):
        made = records.checkpoint_keyed("k", checkpointing.agent_parts_of(state), note)
        assert made == idempotency.keyed("checkpoints", "k", {"agent_state": state, "note": note})
        assert made.request_hash
