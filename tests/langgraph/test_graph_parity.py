"""The graphs LangGraph's documentation shows, each run on InMemorySaver and on QuestlogSaver (on
PostgreSQL and on SQLite), with what the graph answers compared: its results and interrupts, its
state and next nodes, its history, and the subgraphs' own state. Interrupt and checkpoint ids are
random in each run, so they are compared by what they mean (two interrupts have two ids, an id
answered once is refused the second time), not by value."""

import asyncio
import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.errors import UnknownInterruptError
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Interrupt, Send, interrupt

from questlog_client.langgraph import QuestlogSaver
from tests.langgraph.reference import ReferenceSaver

pytestmark = pytest.mark.django_db(transaction=True)


class State(TypedDict, total=False):
    request: str
    name: str
    age: int
    answers: Annotated[list, operator.add]
    count: Annotated[int, operator.add]
    steps: Annotated[list, operator.add]
    item: int


def config(thread_id: str = "thread-1", **configurable: Any) -> dict:
    return {"configurable": {"thread_id": thread_id, **configurable}}


def shown(value: Any) -> Any:
    """A graph's answer without the random ids: an interrupt is its value."""
    if isinstance(value, Interrupt):
        return ("interrupt", shown(value.value))
    if isinstance(value, dict):
        return {key: shown(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [shown(item) for item in value]
    return value


def history(graph, thread: dict) -> list[Any]:
    """The thread's checkpoints newest first: what made each one, its step, values and next nodes,
    and the interrupts its tasks wait on (in any order: parallel tasks ask in the order they finish)."""
    return [
        (
            state.metadata.get("source"),
            state.metadata.get("step"),
            shown(state.values),
            state.next,
            sorted(repr(shown(item.value)) for item in state.interrupts),
        )
        for state in graph.get_state_history(thread)
    ]


def chain(*nodes: tuple[str, Callable], state: type = State, checkpointer=None):
    builder = StateGraph(state)
    previous = START
    for name, node in nodes:
        builder.add_node(name, node)
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder.compile(checkpointer=checkpointer)


# --- the scenarios: each takes a checkpointer and answers what the graph showed -------------------


def several_interrupts_in_one_node(saver) -> list[Any]:
    def ask(state: State) -> State:
        name = interrupt("What is your name?")
        age = interrupt(f"How old are you, {name}?")
        city = interrupt("Where do you live?")
        return {"name": f"{name} of {city}", "age": age}

    graph = chain(("ask", ask), checkpointer=saver)
    seen = [shown(graph.invoke({"request": "sign up"}, config()))]
    for answer in ["Ada", 36, "London"]:
        seen.append(shown(graph.invoke(Command(resume=answer), config())))
    return [*seen, history(graph, config())]


def parallel_interrupts_answered_by_a_map(saver) -> list[Any]:
    def asker(topic: str):
        return lambda state: {"answers": [f"{topic}: {interrupt(f'Approve the {topic}?')}"]}

    builder = StateGraph(State)
    for topic in ("venue", "menu"):
        builder.add_node(topic, asker(topic))
        builder.add_edge(START, topic)
        builder.add_edge(topic, END)
    graph = builder.compile(checkpointer=saver)
    first = graph.invoke({"request": "offsite"}, config())
    asked = first["__interrupt__"]
    assert len({item.id for item in asked}) == 2  # each parallel interrupt has its own id
    answers = {item.id: f"yes to {item.value}" for item in asked}
    # Parallel tasks ask in the order their threads finish, on any saver: the questions, not their order.
    first_shown = {**shown(first), "__interrupt__": sorted(shown(asked), key=repr)}
    return [first_shown, shown(graph.invoke(Command(resume=answers), config())), history(graph, config())]


def resume_with_an_update_applies_it_once(saver) -> list[Any]:
    def ask(state: State) -> State:
        return {"answers": [interrupt("Go on?")], "count": 10}

    graph = chain(("ask", ask), ("after", lambda state: {"steps": ["after"]}), checkpointer=saver)
    first = graph.invoke({"request": "count", "count": 1}, config())
    final = graph.invoke(Command(resume="yes", update={"count": 100}), config())
    assert final["count"] == 111  # the input, the update once, the node once
    return [shown(first), shown(final), history(graph, config())]


def strict_resume(saver) -> list[Any]:
    """Each interrupt() call of a node has its own id: an answer retried after the node asked its
    next question is refused instead of answering that question."""
    strict = config(__pregel_strict_resume=True)

    def ask_twice(state: State) -> State:
        return {"answers": [interrupt("First question?"), interrupt("Second question?")]}

    graph = chain(("ask", ask_twice), checkpointer=saver)
    asked = graph.invoke({"request": "two questions"}, strict)["__interrupt__"][0]
    then = graph.invoke(Command(resume={asked.id: "one"}), strict)
    second_asked = then["__interrupt__"][0]
    refused = None
    try:
        graph.invoke(Command(resume={asked.id: "one again"}), strict)
    except UnknownInterruptError as error:
        refused = (error.reason, list(error.interrupt_ids) == [asked.id], list(error.pending_ids) == [second_asked.id])
    assert refused == ("not_pending", True, True)
    final = graph.invoke(Command(resume={second_asked.id: "two"}), strict)
    return [shown(then), second_asked.id != asked.id, refused, shown(final), history(graph, strict)]


def subgraph_that_interrupts(saver) -> list[Any]:
    def ask(state: State) -> State:
        return {"answers": [interrupt(f"Book {state['request']}?")]}

    child = chain(("prepare", lambda state: {"steps": ["child prepared"]}), ("ask", ask), ("book", lambda state: {"steps": ["child booked"]}))
    graph = chain(("plan", lambda state: {"steps": ["planned"]}), ("child", child), ("report", lambda state: {"steps": ["reported"]}), checkpointer=saver)
    first = graph.invoke({"request": "the lodge"}, config())
    state = graph.get_state(config(), subgraphs=True)
    (task,) = state.tasks
    inner = task.state
    child_history = history(graph, inner.config)
    namespaces = sorted({item.config["configurable"]["checkpoint_ns"].split(":")[0] for item in saver.list(config())})
    final = graph.invoke(Command(resume="booked"), config())
    return [shown(first), task.name, shown(inner.values), inner.next, child_history, namespaces, shown(final), history(graph, config())]


def time_travel_and_fork(saver) -> list[Any]:
    graph = chain(
        ("draft", lambda state: {"steps": [f"draft of {state['request']}"]}),
        ("review", lambda state: {"steps": [f"review after {len(state['steps'])} steps"]}),
        checkpointer=saver,
    )
    graph.invoke({"request": "a poem"}, config())
    before = history(graph, config())
    (at_review,) = [state for state in graph.get_state_history(config()) if state.next == ("review",)]
    forked = graph.update_state(at_review.config, {"request": "a song", "steps": ["edited by hand"]})
    replayed = graph.invoke(None, forked)
    return [before, shown(replayed), history(graph, config())]


def send_fan_out(saver) -> list[Any]:
    builder = StateGraph(State)
    builder.add_node("work", lambda state: {"answers": [state["item"] * 10]})
    builder.add_node("collect", lambda state: {"steps": [f"collected {sorted(state['answers'])}"]})
    builder.add_conditional_edges(START, lambda state: [Send("work", {"item": n}) for n in range(4)], ["work"])
    builder.add_edge("work", "collect")
    builder.add_edge("collect", END)
    graph = builder.compile(checkpointer=saver)
    return [shown(graph.invoke({"request": "fan out"}, config())), history(graph, config())]


def durability(mode: str, run_async: bool = False) -> Callable[[Any], list[Any]]:
    def scenario(saver) -> list[Any]:
        def ask(state: State) -> State:
            return {"answers": [interrupt("Publish?")]}

        graph = chain(("one", lambda state: {"steps": ["one"]}), ("two", lambda state: {"steps": ["two"]}), ("ask", ask), checkpointer=saver)

        def run(value: Any) -> Any:
            if run_async:
                return asyncio.run(graph.ainvoke(value, config(), durability=mode))
            return graph.invoke(value, config(), durability=mode)

        return [shown(run({"request": "publish"})), shown(run(Command(resume="yes"))), history(graph, config())]

    return scenario


def append_all(state: list | None, writes: list) -> list:
    return [*(state or []), *(item for batch in writes for item in batch)]


class DeltaState(TypedDict, total=False):
    log: Annotated[list, DeltaChannel(append_all, snapshot_frequency=3)]
    turns: int


def delta_channels(saver) -> list[Any]:
    def turn(state: DeltaState) -> DeltaState:
        return {"log": [f"turn {state.get('turns', 0)}"], "turns": state.get("turns", 0) + 1}

    builder = StateGraph(DeltaState)
    builder.add_node("turn", turn)
    builder.add_edge(START, "turn")
    builder.add_conditional_edges("turn", lambda state: END if state["turns"] >= 7 else "turn")
    graph = builder.compile(checkpointer=saver)
    final = graph.invoke({"log": ["start"], "turns": 0}, config())
    (middle,) = [state for state in graph.get_state_history(config()) if state.values.get("turns") == 3]
    forked = graph.update_state(middle.config, {"log": ["edited"]})
    return [final, history(graph, config()), graph.get_state(forked).values, shown(graph.invoke(None, forked))]


SCENARIOS = {
    "several interrupts in one node": several_interrupts_in_one_node,
    "parallel interrupts answered by a map": parallel_interrupts_answered_by_a_map,
    "resume with Command(update=...) applies it once": resume_with_an_update_applies_it_once,
    "strict resume": strict_resume,
    "a subgraph that interrupts": subgraph_that_interrupts,
    "time travel: history, update_state, fork": time_travel_and_fork,
    "Send fan-out": send_fan_out,
    "durability exit": durability("exit"),
    "durability async": durability("async"),
    "durability sync": durability("sync"),
    "durability sync, ainvoke": durability("sync", run_async=True),
    "delta channels": delta_channels,
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_graph_behaves_on_questlog_as_on_in_memory_saver(scenario: str, questlog_saver: QuestlogSaver) -> None:
    expected = SCENARIOS[scenario](ReferenceSaver())
    assert SCENARIOS[scenario](questlog_saver) == expected
