"""`questlog-mcp`: Questlog's MCP server on standard input and output, for hosts that only launch
local commands. It serves the same tools, prompt and resource as the server's `/mcp`, calling the
Questlog server's HTTP API with an agent token:

    QUESTLOG_URL=https://questlog.example.com QUESTLOG_TOKEN=qlt_… questlog-mcp
"""

from __future__ import annotations

import os
import sys

from questlog_client.mcp.backend import HttpBackend
from questlog_client.mcp.tools import build_server

USAGE = "questlog-mcp needs QUESTLOG_URL (the Questlog server, e.g. http://127.0.0.1:8000) and QUESTLOG_TOKEN (an agent token)."


def main() -> None:
    url, token = os.environ.get("QUESTLOG_URL", "").strip(), os.environ.get("QUESTLOG_TOKEN", "").strip()
    if not url or not token:
        sys.exit(USAGE)
    backend = HttpBackend(url, token)
    build_server(lambda: backend).run("stdio")


if __name__ == "__main__":
    main()
