"""Baseline (c): the smallest FastAPI WebSocket handler answering the echo protocol.

uvicorn with uvloop, httptools and the sans-I/O websockets implementation, orjson for JSON:
the ceiling of envkit's own stack, without any of envkit's machinery.

    python benchmarks/servers/fastapi_echo.py --port 8003
"""

from __future__ import annotations

import argparse

import uvicorn
from fastapi import FastAPI, WebSocket, WebSocketDisconnect

from echo_frames import EchoSession, answer

app = FastAPI()


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "healthy"}


@app.websocket("/ws")
async def session(websocket: WebSocket) -> None:
    await websocket.accept()
    state = EchoSession()
    try:
        while True:
            reply = answer(await websocket.receive_text(), state)
            if reply is None:
                await websocket.close()
                return
            await websocket.send_text(reply.decode())
    except WebSocketDisconnect:
        pass


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", ws="websockets-sansio",
                log_level="warning", backlog=4096)
