"""Query budgets of the LangGraph endpoints, through the API with token auth: a save and a read
cost the same at 10 and at 300 checkpoints of history (the token check counts; BEGIN and COMMIT
do not), and a delta history walks 300 ancestors in a query per hundred."""

import uuid

import pytest

from quests.engine import checkpoints as engine_checkpoints
from quests.langgraph.services.history import ANCESTORS_WINDOW
from tests.test_query_budgets import django_assert_max_num_queries  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)

# A save read first and written after (`put`), and the child of this process's last save of the
# thread, in one statement (`put_child`: tests/test_graph_put_one_trip.py).
BUDGETS = {"put": 2, "put_child": 1, "put_writes": 1, "get_tuple": 1}
CHANNELS = {f"k{i:02d}": {"type": "json", "data": {"text": "x" * 480, "n": i}} for i in range(20)}


def save(agent, thread_id: str, step: int, parent: str | None) -> str:
    graph_id = f"1f0{step:013d}-{uuid.uuid4().hex[:8]}"
    versions = {name: f"{step + 1 if name == 'k00' or step == 0 else 1:032d}.0" for name in CHANNELS}
    changed = CHANNELS if step == 0 else {"k00": {"type": "json", "data": {"step": step}}}
    response = agent.post(
        "langgraph/checkpoints",
        {
            "thread_id": thread_id,
            "checkpoint": {"v": 4, "id": graph_id, "ts": "2026-12-03T00:00:00+00:00", "channel_versions": versions, "versions_seen": {}},
            "metadata": {"source": "loop", "step": step},
            "parent_checkpoint_id": parent,
            "channels": {name: {"version": versions[name], "value": value} for name, value in changed.items()},
        },
    )
    assert response.status_code == 201, response.content
    return graph_id


@pytest.fixture(params=[10, 300], ids=["10-checkpoints", "300-checkpoints"])
def thread(request, agent):
    thread_id = f"budget-{request.param}"
    parent = None
    for step in range(request.param):
        parent = save(agent, thread_id, step, parent)
    return thread_id, parent, request.param


def test_a_save_sends_only_what_changed_within_its_budget(agent, thread, django_assert_max_num_queries):  # noqa: F811
    thread_id, parent, steps = thread
    engine_checkpoints.known_forget()  # as another process would save it
    with django_assert_max_num_queries(BUDGETS["put"]):
        parent = save(agent, thread_id, steps, parent)
    with django_assert_max_num_queries(BUDGETS["put_child"]):
        save(agent, thread_id, steps + 1, parent)


def test_writes_within_their_budget(agent, thread, django_assert_max_num_queries):  # noqa: F811
    thread_id, parent, _ = thread
    body = {"thread_id": thread_id, "checkpoint_id": parent, "task_id": "t1", "writes": [{"idx": 0, "channel": "k01", "value": {"type": "json", "data": 1}}]}
    with django_assert_max_num_queries(BUDGETS["put_writes"]):
        assert agent.post("langgraph/writes", body).status_code == 200


def test_the_latest_checkpoint_within_its_budget(agent, thread, django_assert_max_num_queries):  # noqa: F811
    thread_id, parent, _ = thread
    with django_assert_max_num_queries(BUDGETS["get_tuple"]):
        response = agent.get(f"langgraph/checkpoints?thread_id={thread_id}&checkpoint_ns=&limit=1")
    item = response.json()["items"][0]
    assert item["checkpoint_id"] == parent and len(item["channel_values"]) == 20


def test_delta_history_walks_the_whole_chain_with_a_query_per_hundred_ancestors(agent, thread, django_assert_max_num_queries):  # noqa: F811
    thread_id, _, steps = thread
    # The token, the target, a window of ancestors per hundred, their writes, the seeds' blobs.
    with django_assert_max_num_queries(5 + steps // ANCESTORS_WINDOW):
        response = agent.get(f"langgraph/delta-history?thread_id={thread_id}&channel=k00&channel=never-stored")
    channels = response.json()["channels"]
    assert channels["never-stored"] == {"writes": [], "seed": None}  # walked to the root
    assert channels["k00"]["seed"] == {"type": "json", "data": {"step": steps - 2}}  # the parent's own value


def test_delta_history_ends_a_chain_that_comes_back_on_itself(agent):
    # A client may name any id as a parent, the checkpoint's own included.
    response = agent.post(
        "langgraph/checkpoints",
        {
            "thread_id": "loop",
            "checkpoint": {"v": 4, "id": "same", "channel_versions": {}},
            "parent_checkpoint_id": "same",
        },
    )
    assert response.status_code == 201, response.content
    answer = agent.get("langgraph/delta-history?thread_id=loop&checkpoint_id=same&channel=log")
    assert answer.status_code == 200 and answer.json()["channels"]["log"] == {"writes": [], "seed": None}
