"""Drive /mcp with OpenEnv 0.10.0's own MCPToolClient; run with the OpenEnv venv's python.

    python openenv_mcp_client.py URL   → one JSON line per result: OpenEnv's EchoEnv docstring example, sync and
                                         async, then a step over the attached socket and a tool call sharing a game.
"""

import asyncio
import json
import sys

from openenv.core.mcp_client import MCPToolClient


class EchoEnv(MCPToolClient):
    """OpenEnv's echo client (envs/echo_env/client.py): MCPToolClient with nothing added."""


url = sys.argv[1]

with EchoEnv(base_url=url).sync() as env:             # the EchoEnv docstring example, unchanged but for .sync()
    env.reset()
    tools = env.list_tools()
    print(json.dumps({"sync_tools": [tool.name for tool in tools]}))
    print(json.dumps({"sync_echo_message": env.call_tool("echo_message", message="Hello!")}))
    print(json.dumps({"sync_echo_with_length": env.call_tool("echo_with_length", message="Test")}))


async def shared_game() -> None:
    async with EchoEnv(base_url=url) as env:
        reset = await env.reset()
        print(json.dumps({"async_reset": reset.observation.model_dump()}))
        echoed = await env.call_tool("echo", message="over http")          # over /mcp
        state = await env.state()                                          # over the socket: the same game
        print(json.dumps({"async_echo": echoed, "step_count_after": state.step_count}))
        try:
            await env.call_tool("echo", wrong=1)
        except RuntimeError as error:
            print(json.dumps({"bad_arguments": str(error)}))
        print(json.dumps({"after_error": await env.call_tool("echo_message", message="still here")}))


asyncio.run(shared_game())
