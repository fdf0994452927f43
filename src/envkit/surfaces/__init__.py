"""The protocol surfaces, one module each, all over the one session pool of `envkit.core`.

`ws` (the WebSocket protocol, OpenEnv's included), `mcp/` (MCP, standard and OpenEnv's dialect), `ors` (the
Open Reward Standard), `web/` (the browser page) and `documents` (health, schemas, metadata, tools, metrics).
Each is given what it needs of sessions by `envkit.core.served_env.ServedEnv`; no surface imports another, nor a
transport: a transport may offer faster paths through the ASGI scope, and a surface works without them.
"""
