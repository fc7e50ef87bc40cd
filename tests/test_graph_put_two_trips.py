"""QuestlogSaver.put's server side in two round trips, as the agent's checkpoint is made: one
autocommit read of the live thread's mission and session run without a lock, one autocommit write
of the checkpoint and its LangGraph row that lands only if the mission row is still as read, else
the locked path saves it. Races are run for real, with threads and their own connections, on
PostgreSQL."""

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from quests.engine import checkpoints as engine_checkpoints, graph as engine_graph
from quests.langgraph.models import GraphCheckpoint
from quests.models import GraphThread, Mission, Run
from tests.test_checkpoint_two_trips import assert_one_chain, postgresql_only, then_a_record_lands
from tests.test_concurrency import agents_like, race

CHANNELS = {f"k{i:02d}": {"type": "json", "data": {"text": "x" * 200, "n": i}} for i in range(8)}


def put(agent, thread_id: str, step: int, parent: str | None, graph_id: str | None = None, title: str = ""):
    """LangGraph's loop saving step `step`: every channel at first, then only `k00` (`title`: the
    graph's input, which the save of the input checkpoint brings)."""
    graph_id = graph_id or f"1f0{step:013d}-{uuid.uuid4().hex[:8]}"
    versions = {name: f"{step + 1 if name == 'k00' or step == 0 else 1:032d}.0" for name in CHANNELS}
    changed = CHANNELS if step == 0 else {"k00": {"type": "json", "data": {"step": step}}}
    return agent.post(
        "langgraph/checkpoints",
        {
            "thread_id": thread_id,
            "checkpoint": {"v": 4, "id": graph_id, "ts": "2026-12-04T00:00:00+00:00", "channel_versions": versions, "versions_seen": {}},
            "metadata": {"source": "loop", "step": step, "run_id": "lg-run"},
            "parent_checkpoint_id": parent,
            "channels": {name: {"version": versions[name], "value": value} for name, value in changed.items()},
            **({"title": title} if title else {}),
        },
    )


def started(agent) -> tuple[str, str, int]:
    """A thread whose first save made its mission and session run: (thread id, its last id, mission id)."""
    thread_id = f"t-{uuid.uuid4().hex[:8]}"
    first = put(agent, thread_id, 0, None)
    assert first.status_code == 201, first.content
    return thread_id, first.json()["checkpoint_id"], first.json()["mission_id"]


def assert_rows_name_the_chain(mission_id: int, count: int) -> None:
    checkpoints = assert_one_chain(mission_id)
    rows = GraphCheckpoint.objects.filter(mission_id=mission_id)
    assert rows.count() == count
    assert {row.checkpoint_id for row in rows} <= {c.pk for c in checkpoints}


@pytest.mark.django_db(transaction=True)
@postgresql_only
def test_a_save_on_a_live_session_is_two_statements_without_a_lock(agent):
    """Counted outside any test transaction: the token's check, then the read and the write (each
    save as another process would make it: the child of this process's last save is one statement,
    tests/test_graph_put_one_trip.py)."""
    thread_id, parent, mission_id = started(agent)
    for step in range(1, 4):
        engine_checkpoints.known_forget()
        with CaptureQueriesContext(connection) as captured:
            response = put(agent, thread_id, step, parent)
        assert response.status_code == 201, response.content
        statements = [q["sql"] for q in captured.captured_queries]
        assert len(statements) <= 3 and not any(s.startswith(("BEGIN", "COMMIT", "SAVEPOINT")) for s in statements), statements
        assert not any("FOR UPDATE" in s for s in statements), statements
        assert "quests_graphthread" in statements[-2] and "INSERT INTO checkpoints_graphcheckpoint" in statements[-1]
        saved = response.json()
        row = GraphCheckpoint.objects.get(mission_id=mission_id, graph_id=saved["checkpoint_id"])
        assert (row.checkpoint_id, row.parent_graph_id, row.run_ref) == (saved["questlog_checkpoint_id"], parent, "lg-run")
        assert row.checkpoint.agent_state_refs == {name: ref[1] for name, ref in row.channels.items()}
        parent = saved["checkpoint_id"]
    assert_rows_name_the_chain(mission_id, 4)


@pytest.mark.django_db(transaction=True)
@postgresql_only
def test_the_fast_save_reads_back_as_the_locked_one_does(agent, monkeypatch):
    """The same steps saved through the locked path (every save reads nothing unlocked) give the
    same tuples: the fast path writes what the locked one writes."""
    thread_id, parent, _ = started(agent)
    for step in range(1, 3):
        parent = put(agent, thread_id, step, parent).json()["checkpoint_id"]
    fast = agent.get(f"langgraph/checkpoints?thread_id={thread_id}&checkpoint_ns=&limit=1").json()["items"][0]

    locked_id, locked_parent, _ = started(agent)
    read = engine_graph.graph_put_read
    # Every save takes the locked path: the read says who called, and nothing for the fast path.
    monkeypatch.setattr(engine_graph, "graph_put_read", lambda *args, **kwargs: (read(*args, **kwargs)[0], None))
    for step in range(1, 3):
        locked_parent = put(agent, locked_id, step, locked_parent).json()["checkpoint_id"]
    monkeypatch.undo()
    locked = agent.get(f"langgraph/checkpoints?thread_id={locked_id}&checkpoint_ns=&limit=1").json()["items"][0]
    assert fast["channel_values"] == locked["channel_values"] and len(fast["channel_values"]) == len(CHANNELS)
    assert fast["metadata"] == locked["metadata"]


@pytest.mark.django_db(transaction=True)
@postgresql_only
def test_a_save_whose_mission_moved_after_the_read_takes_the_locked_path(agent, monkeypatch):
    """A record lands on the session run between the save's read and its write: the compare-and-set
    claims nothing, nothing of the first attempt is written, and the locked path saves it."""
    thread_id, parent, mission_id = started(agent)
    run_id = Mission.objects.get(pk=mission_id).active_run_id
    monkeypatch.setattr(engine_graph, "graph_put_read", then_a_record_lands(engine_graph.graph_put_read, agent, run_id))
    with CaptureQueriesContext(connection) as captured:
        response = put(agent, thread_id, 1, parent)
    assert response.status_code == 201, response.content
    assert any("FOR UPDATE" in q["sql"] for q in captured.captured_queries)  # the locked path saved it
    assert_rows_name_the_chain(mission_id, 2)
    head = Mission.objects.get(pk=mission_id).head_checkpoint
    assert head is not None and head.pk == response.json()["questlog_checkpoint_id"]
    assert head.state_refs["decisions"] == Mission.objects.get(pk=mission_id).state_refs["decisions"]


@pytest.mark.django_db(transaction=True)
@postgresql_only
def test_two_savers_on_one_thread_at_once_all_land_in_one_chain(agent):
    """Two workers save to one thread in a loop at once (LangGraph saves in the background): every
    save lands, once, and the mission's checkpoints stay one chain."""
    thread_id, parent, mission_id = started(agent)
    rounds = 6
    answers = race(agents_like(agent, 2), lambda client, i: [put(client, thread_id, 1 + n, parent) for n in range(rounds)][-1])
    assert [a.status for a in answers] == [201, 201]
    assert_rows_name_the_chain(mission_id, 1 + 2 * rounds)


@pytest.mark.django_db(transaction=True)
@postgresql_only
def test_one_id_saved_by_two_savers_at_once_is_saved_once(agent):
    thread_id, parent, mission_id = started(agent)
    for step in range(1, 4):
        graph_id = f"1f0{step:013d}-raced"
        answers = race(agents_like(agent, 2), lambda client, i: put(client, thread_id, step, parent, graph_id=graph_id))  # noqa: B023
        assert [a.status for a in answers] == [201, 201]
        assert answers[0].body == answers[1].body
        parent = graph_id
    assert_rows_name_the_chain(mission_id, 4)


@pytest.mark.django_db
def test_a_retried_save_answers_the_saved_one(agent):
    thread_id, parent, mission_id = started(agent)
    graph_id = f"1f0{1:013d}-again"
    first, again = put(agent, thread_id, 1, parent, graph_id=graph_id), put(agent, thread_id, 1, parent, graph_id=graph_id)
    assert (first.status_code, again.status_code) == (201, 201)
    assert first.json() == again.json()
    assert GraphCheckpoint.objects.filter(mission_id=mission_id).count() == 2


@pytest.mark.django_db
def test_a_stale_session_run_is_ended_and_a_new_one_saves(agent):
    thread_id, parent, mission_id = started(agent)
    stale = Mission.objects.get(pk=mission_id).active_run_id
    Run.objects.filter(pk=stale).update(heartbeat_at=timezone.now() - timedelta(days=1))
    response = put(agent, thread_id, 1, parent)
    assert response.status_code == 201, response.content
    mission = Mission.objects.get(pk=mission_id)
    assert mission.active_run_id not in (None, stale)
    assert Run.objects.get(pk=stale).ended_at is not None
    assert mission.head_checkpoint is not None and mission.head_checkpoint.run_id == mission.active_run_id


@pytest.mark.django_db
def test_a_save_to_a_deleted_thread_is_410_and_writes_nothing(agent):
    thread_id, parent, mission_id = started(agent)
    assert agent.post("langgraph/threads/delete", {"thread_id": thread_id}).status_code == 200
    before = GraphCheckpoint.objects.count()
    response = put(agent, thread_id, 1, parent)
    assert response.status_code == 410 and response.json()["error"]["code"] == "thread_deleted"
    assert GraphCheckpoint.objects.count() == before
    assert GraphThread.objects.get(thread_id=thread_id).deleted_at is not None


@pytest.mark.django_db(transaction=True)
def test_the_input_save_titles_a_thread_that_a_tasks_writes_made_first(agent):
    """LangGraph sends a step's writes and its saves in parallel: a task's writes (no title) may
    make the thread before the save of the graph's input (which brings the title) arrives. The
    save titles the mission still named after its thread (seen once in a full run of the suite)."""
    graph_id = f"1f0{0:013d}-{uuid.uuid4().hex[:8]}"
    writes = {
        "thread_id": "titled-late",
        "checkpoint_id": graph_id,
        "task_id": "t1",
        "writes": [{"idx": 0, "channel": "k01", "value": {"type": "json", "data": 1}}],
    }
    assert agent.post("langgraph/writes", writes).status_code == 200
    mission_id = GraphThread.objects.get(thread_id="titled-late").mission_id
    assert Mission.objects.get(pk=mission_id).title == "titled-late"
    saved = put(agent, "titled-late", 0, None, graph_id=graph_id, title="Plan the offsite")
    assert saved.status_code == 201 and saved.json()["mission_id"] == mission_id
    assert Mission.objects.get(pk=mission_id).title == "Plan the offsite"
