"""A deliberately broken LangGraph agent for replaycheck: its node sends the email first and only
then asks the ledger, so LangGraph's re-run of the node after a crash sends it again. Imported by
the agent processes, so nothing here needs Django."""

from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from examples.langgraph_offsite import finish, run_to_end, thread_config
from questlog_client import Questlog
from questlog_client.fake_service import FakeService
from questlog_client.langgraph import QuestlogSaver

INVITE = {"to": "team@example.com", "subject": "Offsite in May"}


class Sent(TypedDict, total=False):
    request: str
    sent: str


def careless_graph_agent(ql: Questlog, mission_id: int, service: FakeService) -> None:
    if ql.missions.get(mission_id).resume().next_action == "none":
        return
    saver = QuestlogSaver(connection=ql)

    def send(state: Sent, config: RunnableConfig) -> dict[str, Any]:
        outcome = service.call("email.send", INVITE["to"], INVITE, status="sent")
        receipt = saver.operation(config, "send", "email.send", INVITE["to"], INVITE)(lambda op: outcome)
        return {"sent": receipt.external_id}

    builder = StateGraph(Sent)
    builder.add_node("send", send)
    builder.add_edge(START, "send")
    builder.add_edge("send", END)
    config = thread_config(f"mission-{mission_id}", mission_id)
    run_to_end(builder.compile(checkpointer=saver), saver, config, {"request": "Invite the team"}, wait=lambda: None, poll=ql.poll_interval)
    finish(ql, saver, config)
