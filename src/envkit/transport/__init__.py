"""Serving an app on a socket: uvicorn with the limits a public address needs, and the fast paths in one place.

`uvicorn_server` runs an app (`run_server`, `EnvkitServer`); `uvicorn_protocols` gives uvicorn's protocols their
limits and quiet logs; `listener` accepts connections with descriptors in reserve; `ports` checks an address
before anything starts. The fast paths (`fast_paths`, checked at start-up by `fast_path_checks`) are
`ws_frames` (WebSocket frames without websockets' parser), `http_at_once` (`/mcp` and ORS without an ASGI cycle)
and the inline answering of `envkit.core.inline_answers`; each steps aside when what it relies on changed.
"""
