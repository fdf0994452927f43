"""Serving an app on a socket: uvicorn with the limits a public address needs, and the fast paths in one place.

`uvicorn_server` runs an app (`run_server`, `EnvkitServer`); `uvicorn_protocols` gives uvicorn's protocols their
limits and quiet logs; `listener` accepts connections with descriptors in reserve; `ports` checks an address
before anything starts. The fast paths are all in `fast/`, behind one seam (`fast.protocol_classes`): `/ws` frames
answered inside uvicorn's WebSocket protocol and read without websockets' parser, `/mcp` and ORS without an ASGI
cycle; each is checked at start-up and steps aside when what it relies on changed.
"""
