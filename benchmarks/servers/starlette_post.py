"""Floor for an HTTP call on envkit's stack: one bare Starlette POST route on uvicorn (httptools, uvloop).

It answers `POST /mcp` with a JSON-RPC result that carries the request back (and so the step's
token), which is all `envkit bench --protocol mcp` checks: what any HTTP surface on this stack pays per
call before routing, middleware or an endpoint's own work.

    python benchmarks/servers/starlette_post.py --port 8005
"""

from __future__ import annotations

import argparse

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

RESULT_START = b'{"jsonrpc":"2.0","id":1,"result":{"isError":false,"structuredContent":{"episode_id":"e"},"request":'


async def call(request: Request) -> Response:
    return Response(RESULT_START + await request.body() + b"}}", media_type="application/json")


async def health(request: Request) -> Response:
    return JSONResponse({"status": "healthy"})


app = Starlette(routes=[Route("/mcp", call, methods=["POST"]), Route("/health", health)])

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    uvicorn.run(app, host="127.0.0.1", port=parser.parse_args().port, loop="uvloop", http="httptools",
                log_level="warning", backlog=4096)
