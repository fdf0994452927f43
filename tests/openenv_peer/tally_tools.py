"""Call the tally fixture's MCP tools with OpenEnv 0.10's `MCPToolClient`; run with the OpenEnv venv's python.

    python tally_tools.py URL   → one JSON line: the tools listed and the results of add(3), add(4), read()
"""

import json
import sys

from openenv.core.mcp_client import MCPToolClient

with MCPToolClient(base_url=sys.argv[1]).sync() as env:
    env.reset(seed=5)
    tools = sorted(tool.name for tool in env.list_tools())
    results = [env.call_tool("add", amount=3), env.call_tool("add", amount=4), env.call_tool("read")]
print(json.dumps({"tools": tools, "results": results}))
