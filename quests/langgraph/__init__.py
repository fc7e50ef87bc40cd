"""LangGraph's server side, in one package as retention is: the rows (`models.py`), the rules
(`services/`) and the checkpointer's endpoints (`api.py`) behind `questlog_client.langgraph`'s
`QuestlogSaver`. The SQL of its hot path (the put, a task's writes, get_tuple) is the storage
engine's, in `quests/engine/graph.py` and `quests/engine/sql/graph.py`."""
