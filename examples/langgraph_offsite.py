"""A LangGraph graph that plans a team offsite, kept by Questlog (no LLM: every node is deterministic).

    plan → hold the venue (a side effect) → draft → interrupt: a person approves the invitations
         → send them (a side effect) → finish

    python examples/langgraph_offsite.py --url http://127.0.0.1:8000 --token qlt_…

The first invocation stops at the interrupt and prints the mission page where a person approves (or
edits, or rejects) the invitations; the script then waits for that decision and continues the graph
with it. Kill it at any moment and run it again with the same `--thread`: it carries on where the
thread stopped, and neither side effect happens twice, because both go through the mission's
operation ledger (`saver.operation`) with the fake service's `lookup` as the reconcile hook.

`replay_agent` is the same graph as a replaycheck agent:
`python manage.py replaycheck --agent examples.langgraph_offsite:replay_agent`.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Callable
from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import interrupt

from questlog_client import MissionNotStartable, Questlog
from questlog_client.fake_service import FakeService
from questlog_client.langgraph import QuestlogSaver
from questlog_client.langgraph.saver import MISSION_KEY

SEND_ACTION = "send the invitations"
VENUE = {"venue": "Lakeside Lodge", "dates": "May 14-16", "people": 12, "price_eur": 3200}
TEAM = "team@example.com"
# What LangGraph saves after every superstep before the next one starts: with "sync" a crash loses
# at most the superstep under way.
DURABILITY = "sync"
# LangGraph hands the saver's calls (a task's writes, the next checkpoint) to a thread pool; one
# worker takes them in the order they were made, so every run makes the same calls in the same
# order (replaycheck compares them step by step) and a new thread's first two calls never race.
SAVES_IN_ORDER = {"max_concurrency": 1}


class Offsite(TypedDict, total=False):
    request: str
    constraints: list[str]
    plan: str
    hold: str
    invitation: dict[str, Any]
    decision: dict[str, Any]
    sent: str


def build_graph(saver: QuestlogSaver, service: FakeService) -> CompiledStateGraph:
    """The offsite graph, checkpointed by `saver`; its side effects land at `service`."""

    def plan(state: Offsite) -> Offsite:
        rules = "; ".join(state.get("constraints") or []) or "none given"
        return {"plan": f"{VENUE['venue']}, {VENUE['dates']}, {VENUE['people']} people, {VENUE['price_eur']} EUR (rules: {rules})"}

    def hold_venue(state: Offsite, config: RunnableConfig) -> Offsite:
        # LangGraph re-runs a node from its start after a crash: the ledger's stored receipt is
        # what keeps the venue from being held twice.
        receipt = saver.operation(config, "hold-venue", "venue.hold", VENUE["venue"], VENUE, reconcile=service.lookup)(
            service.effect("venue.hold", VENUE["venue"], VENUE, status="held")
        )
        return {"hold": receipt.external_id}

    def draft(state: Offsite) -> Offsite:
        body = f"We meet at {VENUE['venue']} on {VENUE['dates']}. The venue is held ({state['hold']})."
        return {"invitation": {"to": TEAM, "subject": "Team offsite in May", "body": body}}

    def approve(state: Offsite) -> Offsite:
        # Questlog turns this into an approval in the person's inbox; the graph continues with
        # {"decision", "payload", "note"} once they decided (`saver.resume_command`).
        answer = interrupt({"action": SEND_ACTION, "payload": state["invitation"], "reason": "Emails cannot be unsent."})
        return {"decision": answer}

    def send(state: Offsite, config: RunnableConfig) -> Offsite:
        decision = state.get("decision") or {}
        if decision.get("decision") != "approved":
            return {"sent": f"not sent: {decision.get('note') or 'the person declined'}"}
        invitation = decision.get("payload") or state["invitation"]
        receipt = saver.operation(config, "send-invitations", "email.send", invitation["to"], invitation, reconcile=service.lookup)(
            service.effect("email.send", invitation["to"], invitation, status="sent")
        )
        return {"sent": receipt.external_id}

    builder = StateGraph(Offsite)
    for name, node in (("plan", plan), ("hold_venue", hold_venue), ("draft", draft), ("approve", approve), ("send", send)):
        builder.add_node(name, node)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "hold_venue")
    builder.add_edge("hold_venue", "draft")
    builder.add_edge("draft", "approve")
    builder.add_edge("approve", "send")
    builder.add_edge("send", END)
    return builder.compile(checkpointer=saver)


def thread_config(thread_id: str, mission_id: int | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if mission_id is not None:
        configurable[MISSION_KEY] = mission_id  # the thread lives in this existing mission
    return {"configurable": configurable}


Waiter = Callable[[], None]


def run_to_end(graph: CompiledStateGraph, saver: QuestlogSaver, config: RunnableConfig, first_input: Offsite, *, wait: Waiter, poll: float = 1.0) -> Offsite:
    """Drive the thread from wherever it stands to its end: start it, carry on after a crash,
    wait at an interrupt for the person's decision (`wait` between looks). Answers the final state."""
    config = {**config, **SAVES_IN_ORDER}
    while True:
        snapshot = graph.get_state(config)
        if snapshot.interrupts:
            command = saver.resume_command(config)
            if command is None:
                wait()
                time.sleep(poll)
                continue
            graph.invoke(command, config, durability=DURABILITY)
        elif not snapshot.created_at:  # no checkpoint yet: a new thread
            graph.invoke(first_input, config, durability=DURABILITY)
        elif snapshot.next or snapshot.tasks:
            # A superstep was under way when the last process stopped: `next` names the tasks
            # still to run; tasks whose writes were all saved are not in it, but the step that
            # applies them was not taken yet (a crash right after the input's writes).
            graph.invoke(None, config, durability=DURABILITY)
        else:
            return snapshot.values


def replay_agent(ql: Questlog, mission_id: int, service: FakeService) -> None:
    """replaycheck's agent: the offsite graph on the mission the harness made, through the
    harness's own connection (so every call of the graph is a step it can crash after)."""
    mission = ql.missions.get(mission_id)
    bundle = mission.resume()
    if bundle.next_action == "none":
        return  # completed by an earlier process
    saver = QuestlogSaver(connection=ql)
    config = thread_config(f"mission-{mission_id}", mission_id)
    request = {"request": bundle.mission.objective, "constraints": [c.text for c in bundle.constraints]}
    # Waiting reads the bundle: replaycheck checks that it still holds what was decided, and its
    # person acts as soon as it sees the mission waits.
    run_to_end(build_graph(saver, service), saver, config, request, wait=mission.resume, poll=ql.poll_interval)
    finish(ql, saver, config)


def finish(ql: Questlog, saver: QuestlogSaver, config: RunnableConfig) -> None:
    """Complete the thread's mission, once: a process that crashed right after finishing finds it
    completed, and a completed mission starts no session to stop."""
    if ql.missions.get(saver.mission_id(config)).status != "completed":
        saver.finish(config, "The offsite is planned.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Plan a team offsite with LangGraph, kept by Questlog.")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--token", required=True, help="An agent token (manage.py create_agent_token).")
    parser.add_argument("--thread", default=f"offsite-{uuid.uuid4().hex[:8]}", help="Resume this thread instead of a new one.")
    parser.add_argument("--service", default="var/langgraph-offsite.sqlite3", help="The fake service's record of side effects.")
    parser.add_argument("--poll", type=float, default=2.0, help="Seconds between looks while a person decides.")
    args = parser.parse_args(argv)
    service = FakeService(args.service)
    config = thread_config(args.thread)
    with Questlog(args.url, args.token) as ql:
        saver = QuestlogSaver(connection=ql)
        told: list[int] = []

        def wait() -> None:
            if not told:
                told.append(saver.mission_id(config))
                print(f"Waiting for a person: approve the invitations at {args.url.rstrip('/')}/missions/{told[0]}/", flush=True)

        print(f"Thread {args.thread} (after a crash, run again with --thread {args.thread} to carry on)", flush=True)
        try:
            final = run_to_end(build_graph(saver, service), saver, config, {"request": "Plan the team offsite"}, wait=wait, poll=args.poll)
        except MissionNotStartable as stopped:  # a person paused or cancelled the mission meanwhile
            raise SystemExit(f"Not going on: {stopped}") from None
        finish(ql, saver, config)
    print(json.dumps(final, indent=2, default=str))


if __name__ == "__main__":
    main()
