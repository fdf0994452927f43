"""Play echo episodes through the official `mcp` SDK's streamable-HTTP client (1.x or 2.x); run with that venv's python.

    python sdk_episodes.py URL N [legacy]
        N clients at once (2.x with `legacy`: the initialize handshake), each: list tools, reset, echo its own
        message twice, echo_with_length, close; one JSON line per client, then one for the protocol errors.
"""

import asyncio
import json
import sys
from importlib.metadata import version

MAJOR = int(version("mcp").split(".")[0])


async def session(url: str):
    """An initialised MCP client: 2.x's `Client` (which probes the stateless revision first), 1.x's ClientSession."""
    if MAJOR >= 2:
        from mcp.client import Client

        return Client(url + "/mcp", mode="legacy" if "legacy" in sys.argv[3:] else "auto")
    from contextlib import AsyncExitStack

    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    class Session1:
        async def __aenter__(self):
            self.stack = AsyncExitStack()
            read, write, _ = await self.stack.enter_async_context(streamable_http_client(url + "/mcp"))
            self.session = await self.stack.enter_async_context(ClientSession(read, write))
            self.session.protocol_version = (await self.session.initialize()).protocolVersion
            return self.session

        async def __aexit__(self, *exc):
            await self.stack.aclose()

    return Session1()


def result_of(result) -> dict:
    return {"text": result.content[0].text if result.content else None, "structured": result.structured_content
            if hasattr(result, "structured_content") else result.structuredContent,
            "is_error": result.is_error if hasattr(result, "is_error") else result.isError}


async def play(url: str, who: int) -> dict:
    async with await session(url) as client:
        tools = (await client.list_tools()).tools
        reset = result_of(await client.call_tool("reset", {"seed": who}))
        episode = reset["structured"]["episode_id"]
        message = f"client {who} " + "x" * who
        first = result_of(await client.call_tool("echo", {"episode_id": episode, "message": message}))
        await asyncio.sleep(0.05)   # let the other clients act in between
        second = result_of(await client.call_tool("echo", {"episode_id": episode, "message": message}))
        length = result_of(await client.call_tool("echo_with_length", {"episode_id": episode, "message": "Test"}))
        closed = result_of(await client.call_tool("close", {"episode_id": episode}))
        return {"who": who, "major": MAJOR, "tools": [tool.name for tool in tools], "episode_id": episode,
                "reset": reset, "first": first, "second": second, "length": length, "closed": closed,
                "protocol": getattr(client, "protocol_version", None)}


async def errors(url: str) -> dict:
    """What the SDK raises for protocol errors: unknown tool, missing episode, bad arguments, a closed episode."""
    found = {}
    async with await session(url) as client:
        episode = result_of(await client.call_tool("reset", {}))["structured"]["episode_id"]
        closed = result_of(await client.call_tool("reset", {}))["structured"]["episode_id"]
        await client.call_tool("close", {"episode_id": closed})
        cases = {"unknown_tool": ("nope", {}), "no_episode": ("echo", {"message": "hi"}),
                 "bad_arguments": ("echo", {"episode_id": episode, "message": 5, "extra": 1}),
                 "closed_episode": ("echo", {"episode_id": closed, "message": "hi"})}
        for name, (tool, arguments) in cases.items():
            try:
                found[name] = {"result": result_of(await client.call_tool(tool, arguments))}
            except Exception as error:   # the SDK raises its McpError / MCPError for JSON-RPC errors
                code = getattr(getattr(error, "error", None), "code", None)
                found[name] = {"error": str(error), "code": code}
        found["after"] = result_of(await client.call_tool("echo", {"episode_id": episode, "message": "on"}))["text"]
        await client.call_tool("close", {"episode_id": episode})
    return found


async def main() -> None:
    url, count = sys.argv[1], int(sys.argv[2])
    for line in await asyncio.gather(*(play(url, who) for who in range(count))):
        print(json.dumps(line))
    print(json.dumps({"errors": await errors(url)}))


asyncio.run(main())
