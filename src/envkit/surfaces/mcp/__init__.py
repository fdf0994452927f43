"""`/mcp`: every environment's tools for MCP clients, on the app's one session pool.

Two dialects share the endpoint, told apart per request:

- OpenEnv 0.10.0's (`openenv_dialect`): `openenv/session/create` opens a session, tool calls name it by
  `session_id`, and `/ws?session_id=...` attaches a WebSocket to the same game.
- Standard MCP over streamable HTTP (`standard`), for the `mcp` SDK 1.x and 2.x: an episode is held by the
  `episode_id` the `reset` tool returns.
"""

from .endpoint import McpEndpoint

__all__ = ["McpEndpoint"]
