"""QuestlogSaver.put's server side in one round trip (issue 20): LangGraph's loop saves each step's
checkpoint as the child of the one before, so once this process saved a thread's checkpoint it
keeps the mission as that save left it, with the save's channel map (`engine.graph.GraphKnown`),
and the child's save is one autocommit statement that authenticates the token, claims the mission
row only if it is still that one and the thread is live, and writes the checkpoint with its
LangGraph row. Whatever moved the row, deleted the thread or saved the id meanwhile, that statement
writes nothing and the save reads first, as before. Real PostgreSQL, real threads."""

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from quests.engine import checkpoints as engine_checkpoints
from quests.langgraph.models import GraphCheckpoint
from quests.models import AgentToken, Mission
from tests.conftest import ApiClient
from tests.test_checkpoint_one_trip import elsewhere
from tests.test_checkpoint_two_trips import UNAUTHENTICATED, postgresql_only
from tests.test_graph_put_two_trips import CHANNELS, assert_rows_name_the_chain, put, started
from tests.test_throttle_count import cache_statements, counted_rate, database_cache  # noqa: F401 - fixtures

pytestmark = [pytest.mark.django_db(transaction=True), postgresql_only]


def statements_of(agent: ApiClient, thread_id: str, step: int, parent: str | None, graph_id: str | None = None):
    with CaptureQueriesContext(connection) as captured:
        response = put(agent, thread_id, step, parent, graph_id=graph_id)
    return response, [q["sql"] for q in captured.captured_queries]


def fast_thread(agent: ApiClient) -> tuple[str, str, int]:
    """A thread whose last save went the fast way in this process: (thread id, its last id, mission id)."""
    thread_id, parent, mission_id = started(agent)  # the first save makes the thread (locked path)
    response = put(agent, thread_id, 1, parent)  # read, then the claimed write
    assert response.status_code == 201, response.content
    return thread_id, response.json()["checkpoint_id"], mission_id


def test_the_child_of_this_process_s_last_save_is_one_statement(agent):
    """Counted outside any test transaction: what production sends, BEGIN and COMMIT included."""
    engine_checkpoints.known_forget()
    thread_id, parent, mission_id = fast_thread(agent)
    for step in range(2, 6):
        response, statements = statements_of(agent, thread_id, step, parent)
        assert response.status_code == 201, response.content
        assert len(statements) == 1, statements
        (statement,) = statements
        assert "quests_agenttoken" in statement and "INSERT INTO checkpoints_graphcheckpoint" in statement
        saved = response.json()
        row = GraphCheckpoint.objects.get(mission_id=mission_id, graph_id=saved["checkpoint_id"])
        assert (row.checkpoint_id, row.parent_graph_id, row.run_ref) == (saved["questlog_checkpoint_id"], parent, "lg-run")
        assert row.checkpoint.agent_state_refs == {name: ref[1] for name, ref in row.channels.items()}
        assert set(row.channels) == set(CHANNELS)
        parent = saved["checkpoint_id"]
    assert_rows_name_the_chain(mission_id, 6)
    latest = agent.get(f"langgraph/checkpoints?thread_id={thread_id}&checkpoint_ns=&limit=1").json()["items"][0]
    assert latest["channel_values"]["k00"] == {"type": "json", "data": {"step": 5}}
    assert latest["channel_values"]["k03"] == CHANNELS["k03"]  # an unchanged channel, from the first save


def test_a_save_that_is_not_the_child_of_the_last_one_reads_first(agent):
    """A fork (LangGraph replaying from an earlier checkpoint) names another parent: read, then write."""
    thread_id, parent, mission_id = fast_thread(agent)
    first = GraphCheckpoint.objects.filter(mission_id=mission_id).order_by("id").first()
    assert first is not None
    response, statements = statements_of(agent, thread_id, 2, first.graph_id)
    assert response.status_code == 201, response.content
    assert len(statements) == 2 and "INSERT INTO checkpoints_graphcheckpoint" in statements[-1]
    assert GraphCheckpoint.objects.get(mission_id=mission_id, graph_id=response.json()["checkpoint_id"]).parent_graph_id == first.graph_id


def test_a_mission_moved_by_another_process_claims_nothing_and_is_saved_after_a_read(agent):
    thread_id, parent, mission_id = fast_thread(agent)
    elsewhere(lambda: Mission.objects.filter(pk=mission_id).update(title="Renamed by its person"))
    response, statements = statements_of(agent, thread_id, 2, parent)
    assert response.status_code == 201, response.content
    assert len(statements) == 3  # the one statement, then the read and the claimed write
    assert_rows_name_the_chain(mission_id, 3)
    assert Mission.objects.get(pk=mission_id).title == "Renamed by its person"
    _, statements = statements_of(agent, thread_id, 3, response.json()["checkpoint_id"])
    assert len(statements) == 1  # known again


def test_a_save_to_a_thread_deleted_since_is_410_and_writes_nothing(agent):
    thread_id, parent, mission_id = fast_thread(agent)
    elsewhere(lambda: agent.post("langgraph/threads/delete", {"thread_id": thread_id}))
    before = GraphCheckpoint.objects.count()
    response = put(agent, thread_id, 2, parent)
    assert response.status_code == 410 and response.json()["error"]["code"] == "thread_deleted"
    assert GraphCheckpoint.objects.count() == before


def test_a_token_revoked_since_the_last_save_is_401_and_nothing_is_written(agent):
    thread_id, parent, mission_id = fast_thread(agent)
    AgentToken.objects.update(revoked_at=timezone.now())
    response = put(agent, thread_id, 2, parent)
    assert (response.status_code, response.json()) == (401, UNAUTHENTICATED)
    assert_rows_name_the_chain(mission_id, 2)


def test_an_id_saved_already_named_again_as_the_child_answers_the_saved_one(agent):
    """A client that sends a saved id again as the child of the last save: the statement claims
    nothing (the id is saved), and the read answers the saved checkpoint; nothing is written twice."""
    thread_id, parent, mission_id = fast_thread(agent)
    again = put(agent, thread_id, 2, parent, graph_id=parent)
    assert again.status_code == 201, again.content
    assert again.json()["checkpoint_id"] == parent
    assert_rows_name_the_chain(mission_id, 2)


def test_another_token_of_the_same_person_does_not_use_what_this_one_saved(agent, alice):
    from quests.services.tokens import token_create

    thread_id, parent, mission_id = fast_thread(agent)
    _, raw = token_create(user=alice, name="second")
    second = ApiClient(Client(), raw)
    response, statements = statements_of(second, thread_id, 2, parent)
    assert response.status_code == 201 and len(statements) == 2  # read first: its own caller
    response, statements = statements_of(agent, thread_id, 3, response.json()["checkpoint_id"])
    assert response.status_code == 201 and len(statements) == 2  # a child of the other token's save
    assert_rows_name_the_chain(mission_id, 4)


def test_one_statement_counts_the_request_and_past_the_rate_saves_nothing(agent, counted_rate):  # noqa: F811
    thread_id, parent, mission_id = fast_thread(agent)
    saved = GraphCheckpoint.objects.filter(mission_id=mission_id).count()
    step = 2
    while True:
        with CaptureQueriesContext(connection) as captured:
            response = put(agent, thread_id, step, parent)
        if response.status_code == 429:
            break
        assert response.status_code == 201, response.content
        assert len(captured) == 1
        (statement,) = cache_statements(captured)
        assert "quests_agenttoken" in statement and "checkpoints_graphcheckpoint" in statement
        parent, step, saved = response.json()["checkpoint_id"], step + 1, saved + 1
    assert step > 2 and response.json()["error"]["code"] == "rate_limited"  # one save at least in one statement
    assert GraphCheckpoint.objects.filter(mission_id=mission_id).count() == saved


def test_two_savers_of_one_token_on_one_thread_at_once_keep_one_chain(agent):
    """Two workers of this process save to one thread at once, each as the child of its own last
    save: what the process knows is taken out while used, so every save lands once, in one chain."""
    from tests.test_concurrency import agents_like, race

    thread_id, parent, mission_id = fast_thread(agent)
    rounds = 6

    def saves(client: ApiClient, i: int):
        last, answer = parent, None
        for n in range(rounds):
            answer = put(client, thread_id, 2 + n, last)
            last = answer.json()["checkpoint_id"]
        return answer

    answers = race(agents_like(agent, 2), saves)
    assert [a.status for a in answers] == [201, 201]
    assert_rows_name_the_chain(mission_id, 2 + 2 * rounds)
