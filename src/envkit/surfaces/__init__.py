"""The protocol surfaces, one module each, all over the one session pool of `envkit.core`.

`ws` (the WebSocket protocol, OpenEnv's included), `mcp/` (MCP, standard and OpenEnv's dialect), `ors` (the
Open Reward Standard), `web/` (the browser page) and `documents` (health, schemas, metadata, tools, metrics).
`http_exchange` is the raw HTTP request and response that `/mcp` and ORS are served with. No surface imports a
transport: a transport may offer faster paths through the ASGI scope, and a surface works without them.
"""
