"""Questlog as a Model Context Protocol server: the tools, the `resume_mission` prompt and the
resume resource (`tools.build_server`), over a `Backend` that either calls the services in the
Questlog server itself (`quests/api/mcp_backend.py`, served at `/mcp`) or the HTTP API
(`backend.HttpBackend`, the `questlog-mcp` stdio command in `stdio.py`)."""
