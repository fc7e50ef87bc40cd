"""QuestlogSaver against InMemorySaver, differentially: random sequences of what LangGraph asks a
checkpointer (put, put_writes with one channel several times, special and ordinary channels mixed,
several tasks and index collisions, get_tuple, list with filters, `before` and `limit`, delta
channel history, delete_thread, copy_thread, prune) go to both savers, and after every step both
answer the same. On PostgreSQL and on SQLite.

Two documented differences are kept out of the sequences rather than compared: a deleted thread's id
stays taken in Questlog (a late save is refused with 410 instead of bringing the thread back
half-empty), and a copy's target must be a new thread."""

import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from questlog_client.langgraph import QuestlogSaver
from tests.langgraph.reference import ReferenceSaver, plain, plain_list

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 3  # slots 0..2 are written; 3 and 4 only ever receive copies
NAMESPACES = ["", "child:task-1"]
CHANNELS = ["a", "b", "c"]
TASKS = ["task-1", "task-2"]
TASK_PATHS = ["", "~__pregel_pull, a", "~__pregel_push, 0"]
# Ordinary channels, and the special ones LangGraph writes at fixed negative indexes. A plain
# `__interrupt__` value (no interrupt id) asks no person anything.
WRITE_CHANNELS = ["a", "b", "__resume__", "__error__", "__scheduled__", "__interrupt__"]

values = st.one_of(
    st.integers(-5, 5),
    st.text(alphabet="xyz", max_size=3),
    st.none(),
    st.lists(st.integers(0, 3), max_size=3),
    st.tuples(st.integers(0, 3), st.text(alphabet="xy", max_size=2)),
)
thread = st.integers(0, THREADS - 1)
namespace = st.sampled_from(NAMESPACES)
metadata_filter = st.sampled_from([None, {"source": "loop"}, {"source": "input"}, {"step": 1}, {"tag": "x"}, {"source": "loop", "step": 2}])

saves = st.tuples(
    st.just("put"),
    thread,
    namespace,
    st.booleans(),
    st.dictionaries(st.sampled_from(CHANNELS), st.one_of(values, st.just(...)), max_size=3),
    st.sets(st.sampled_from(CHANNELS), max_size=1),
    st.sampled_from(["input", "loop", "update"]),
    st.integers(-1, 3),
    st.booleans(),
)
writes = st.tuples(
    st.just("put_writes"),
    st.integers(-1, 7),
    st.sampled_from(TASKS),
    st.sampled_from(TASK_PATHS),
    st.lists(st.tuples(st.sampled_from(WRITE_CHANNELS), values), min_size=1, max_size=5),
)
# Saves and writes twice as often as the rest: the reads and whole-thread moves need something to find.
operations = st.one_of(
    saves,
    writes,
    saves,
    writes,
    st.tuples(st.just("get_tuple"), thread, namespace, st.integers(-1, 5)),
    st.tuples(
        st.just("list"),
        st.one_of(st.none(), thread),
        st.one_of(st.none(), namespace),
        metadata_filter,
        st.one_of(st.none(), st.integers(0, 5)),
        st.one_of(st.none(), st.integers(1, 3)),
    ),
    st.tuples(st.just("delta"), st.integers(-1, 7), st.sets(st.sampled_from(CHANNELS), min_size=1)),
    st.tuples(st.just("delete_thread"), thread),
    st.tuples(st.just("copy_thread"), thread, st.integers(THREADS, THREADS + 1)),
    st.tuples(st.just("prune"), st.sets(thread, min_size=1), st.sampled_from(["keep_latest", "delete"])),
)


@dataclass
class World:
    """What the sequence has made so far, to draw valid arguments from."""

    prefix: str
    made: list[str] = field(default_factory=list)  # checkpoint ids, oldest first (ids sort by time)
    saved: dict[tuple[int, str], list[str]] = field(default_factory=dict)
    versions: dict[tuple[int, str], dict[str, str]] = field(default_factory=dict)
    deleted: set[int] = field(default_factory=set)
    copied: set[int] = field(default_factory=set)

    def thread_id(self, slot: int) -> str:
        return f"{self.prefix}-{slot}"

    def config(self, slot: int, ns: str, checkpoint_id: str | None = None) -> dict[str, Any]:
        configurable = {"thread_id": self.thread_id(slot), "checkpoint_ns": ns}
        if checkpoint_id is not None:
            configurable["checkpoint_id"] = checkpoint_id
        return {"configurable": configurable}

    def pick(self, slot: int, ns: str, choice: int) -> str | None:
        """A checkpoint of (slot, ns) by `choice`: -1 for none (the newest), or one of its ids,
        or now and then an id never saved."""
        ids = self.saved.get((slot, ns), [])
        if choice < 0:
            return None
        choice %= len(ids) + 1
        return ids[choice] if choice < len(ids) else f"{self.prefix}-missing"

    def any_saved(self, choice: int) -> tuple[int, str, str]:
        """One of the checkpoints saved so far by `choice` (newest for -1), or, with none saved
        yet, a checkpoint that has not arrived (LangGraph may write before its save lands)."""
        saved = [(slot, ns, checkpoint_id) for (slot, ns), ids in self.saved.items() for checkpoint_id in ids if slot not in self.deleted]
        if not saved:
            return 0, "", f"{self.prefix}-early"
        return max(saved, key=lambda item: item[2]) if choice < 0 else saved[choice % len(saved)]

    def next_id(self) -> str:
        number = len(self.made) + 1
        self.made.append(f"{number:08x}-0000-6000-8000-{self.prefix[:12]:0>12}")
        return self.made[-1]


def put(world: World, savers: list, slot: int, ns: str, with_parent: bool, changes: dict, dropped: set, source: str, step: int, tagged: bool) -> None:
    if slot in world.deleted:
        return
    versions = dict(world.versions.get((slot, ns), {}))
    new_versions = {}
    channel_values = {}
    for name, value in changes.items():
        new_versions[name] = versions[name] = savers[0].get_next_version(versions.get(name), None)
        if value is not ...:  # `...`: a version LangGraph gives without a value
            channel_values[name] = value
    for name in dropped:
        versions.pop(name, None)
        new_versions.pop(name, None)
    ids = world.saved.setdefault((slot, ns), [])
    parent = ids[-1] if with_parent and ids else None
    checkpoint_id = world.next_id()
    checkpoint = {
        "v": 4,
        "id": checkpoint_id,
        "ts": f"2026-01-01T00:00:{len(world.made):02d}+00:00",
        "channel_values": channel_values,
        "channel_versions": versions,
        "versions_seen": {"__input__": {}},
        "updated_channels": sorted(new_versions),
    }
    metadata = {"source": source, "step": step, **({"tag": "x"} if tagged else {})}
    for saver in savers:
        saver.put(world.config(slot, ns, parent), {**checkpoint, "channel_values": dict(channel_values)}, dict(metadata), dict(new_versions))
    ids.append(checkpoint_id)
    world.versions[(slot, ns)] = versions


def step(world: World, savers: list, operation: tuple) -> None:
    kind, *args = operation
    if kind == "put":
        put(world, savers, *args)
        slot, ns = args[:2]
        answers = [plain(saver.get_tuple(world.config(slot, ns))) for saver in savers]
    elif kind == "put_writes":
        choice, task_id, task_path, writes = args
        slot, ns, checkpoint_id = world.any_saved(choice)
        if slot in world.deleted:
            return
        for saver in savers:
            saver.put_writes(world.config(slot, ns, checkpoint_id), list(writes), task_id, task_path)
        # What the writes changed, read back at once (a write to a checkpoint that has not arrived
        # yet shows when it does).
        answers = [plain(saver.get_tuple(world.config(slot, ns, checkpoint_id))) for saver in savers]
    elif kind == "get_tuple":
        slot, ns, choice = args
        config = world.config(slot, ns, world.pick(slot, ns, choice))
        answers = [plain(saver.get_tuple(config)) for saver in savers]
    elif kind == "list":
        slot, ns, metadata, before, limit = args
        config = None
        if slot is not None:
            config = {"configurable": {"thread_id": world.thread_id(slot), **({"checkpoint_ns": ns} if ns is not None else {})}}
        before_config = {"configurable": {"checkpoint_id": world.made[before]}} if before is not None and before < len(world.made) else None
        ordered = slot is not None and ns is not None
        if not ordered:
            limit = None  # which ones a limit keeps follows the order, which is not compared here
        answers = [
            [
                item
                for item in plain_list(saver.list(config, filter=metadata, before=before_config, limit=limit), ordered=ordered)
                if item["config"][0].startswith(world.prefix)
            ]
            for saver in savers
        ]
    elif kind == "delta":
        choice, channels = args
        slot, ns, checkpoint_id = world.any_saved(choice)
        config = world.config(slot, ns, checkpoint_id)
        answers = [saver.get_delta_channel_history(config=config, channels=sorted(channels)) for saver in savers]
    elif kind == "delete_thread":
        (slot,) = args
        for saver in savers:
            saver.delete_thread(world.thread_id(slot))
        world.deleted.add(slot)
        answers = [threads(world, saver, [slot]) for saver in savers]
    elif kind == "copy_thread":
        source, target = args
        if target in world.copied:
            return
        for saver in savers:
            saver.copy_thread(world.thread_id(source), world.thread_id(target))
        world.copied.add(target)
        answers = [threads(world, saver, [source, target]) for saver in savers]
    else:
        slots, strategy = args
        for saver in savers:
            saver.prune([world.thread_id(slot) for slot in sorted(slots)], strategy=strategy)
        for slot in slots:
            for ns in NAMESPACES:
                ids = world.saved.get((slot, ns), [])
                world.saved[(slot, ns)] = ids[-1:] if strategy == "keep_latest" else []
                if strategy == "delete":
                    world.versions.pop((slot, ns), None)
        answers = [threads(world, saver, sorted(slots)) for saver in savers]
    assert answers[0] == answers[1], f"{operation}: InMemorySaver {answers[0]!r}\nQuestlogSaver {answers[1]!r}"


def threads(world: World, saver, slots: list[int]) -> list[Any]:
    """Everything the saver holds for these threads, every namespace."""
    return [plain_list(saver.list({"configurable": {"thread_id": world.thread_id(slot)}}), ordered=False) for slot in slots]


@settings(max_examples=15, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sequence=st.tuples(saves, st.lists(operations, max_size=14)).map(lambda drawn: [drawn[0], *drawn[1]]))
def test_questlog_saver_answers_as_in_memory_saver_after_every_step(questlog_saver: QuestlogSaver, sequence: list[tuple]) -> None:
    world = World(prefix=uuid.uuid4().hex[:12])
    savers = [ReferenceSaver(), questlog_saver]
    for operation in sequence:
        step(world, savers, operation)


def test_a_node_that_asks_three_times_keeps_its_batch_of_resume_writes(questlog_saver: QuestlogSaver) -> None:
    """The batch LangGraph sends when a node that called interrupt() three times finishes: three
    `__resume__` writes at one index. PostgreSQL refused to upsert one row twice in one statement
    (a 500, retried three times, then ServerError); the last write counts, as in InMemorySaver."""
    world = World(prefix=uuid.uuid4().hex[:12])
    savers = [ReferenceSaver(), questlog_saver]
    put(world, savers, 0, "", False, {"a": 1}, set(), "loop", 0, False)
    batch = [("__resume__", "first"), ("__resume__", "second"), ("__resume__", "third"), ("age", 3)]
    for saver in savers:
        saver.put_writes(world.config(0, "", world.made[-1]), batch, "task-1", "~__pregel_pull, ask")
    reference, questlog = (saver.get_tuple(world.config(0, "")) for saver in savers)
    assert questlog.pending_writes == reference.pending_writes == [("task-1", "__resume__", "third"), ("task-1", "age", 3)]


def test_delta_history_is_one_request_whatever_the_number_of_ancestors(questlog_saver: QuestlogSaver, monkeypatch) -> None:
    world = World(prefix=uuid.uuid4().hex[:12])
    savers = [ReferenceSaver(), questlog_saver]
    for number in range(30):
        put(world, savers, 0, "", True, {"a": number} if number % 10 == 0 else {"b": number}, set(), "loop", number, False)
        for saver in savers:
            saver.put_writes(world.config(0, "", world.made[-1]), [("c", f"write {number}")], "task-1", "~__pregel_pull, a")
    requests = []
    original = questlog_saver.connection.request
    monkeypatch.setattr(questlog_saver.connection, "request", lambda *args, **kwargs: requests.append(args) or original(*args, **kwargs))
    history = questlog_saver.get_delta_channel_history(config=world.config(0, ""), channels=["a", "b", "c"])
    assert len(requests) == 1
    assert history == savers[0].get_delta_channel_history(config=world.config(0, ""), channels=["a", "b", "c"])
    # `c` is only ever written, never held: its walk goes to the root (the target's own writes
    # are pending for the next step and do not count).
    assert "seed" not in history["c"] and [value for _, _, value in history["c"]["writes"]] == [f"write {n}" for n in range(29)]
    assert history["a"] == {"writes": [], "seed": 20}


def test_delta_history_walks_past_a_channel_versioned_without_a_value(questlog_saver: QuestlogSaver) -> None:
    world = World(prefix=uuid.uuid4().hex[:12])
    savers = [ReferenceSaver(), questlog_saver]
    for changes in ({"a": "held"}, {"a": ...}, {"b": 1}, {"b": 2}):
        put(world, savers, 0, "", True, changes, set(), "loop", 0, False)
        for saver in savers:
            saver.put_writes(world.config(0, "", world.made[-1]), [("a", f"after {changes}")], "task-1", "")
    reference, questlog = (saver.get_delta_channel_history(config=world.config(0, ""), channels=["a"]) for saver in savers)
    assert questlog == reference and reference["a"]["seed"] == "held" and len(reference["a"]["writes"]) == 3
