"""LangGraph on Questlog (`pip install 'questlog[langgraph]'`): `QuestlogSaver` keeps a graph's
threads as missions, turns its interrupts into approvals a person decides in the browser, and runs
its nodes' side effects through the operation ledger. See docs/langgraph.md."""

from questlog_client.langgraph.saver import QuestlogSaver

__all__ = ["QuestlogSaver"]
