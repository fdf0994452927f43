"""Baseline (d): a bare picows + uvloop + orjson server answering the echo protocol.

No framework at all: each frame is answered inside picows's callback. The limit for a Python
server on one core. `GET /health` answers 200 so the benchmark can wait for it like the others.

    python benchmarks/servers/picows_echo.py --port 8004
"""

from __future__ import annotations

import argparse

import uvloop
from picows import WSListener, WSMsgType, WSTransport, WSUpgradeRequest, WSUpgradeResponse, \
    WSUpgradeResponseWithListener, ws_create_server

from echo_frames import EchoSession, answer


class EchoListener(WSListener):
    def __init__(self) -> None:
        self.session = EchoSession()

    def on_ws_frame(self, transport: WSTransport, frame: object) -> None:
        if frame.msg_type is WSMsgType.TEXT:  # type: ignore[attr-defined]
            reply = answer(frame.get_payload_as_bytes(), self.session)  # type: ignore[attr-defined]
            if reply is not None:
                transport.send(WSMsgType.TEXT, reply)
                return
        elif frame.msg_type is not WSMsgType.CLOSE:  # type: ignore[attr-defined]
            return
        transport.send_close()
        transport.disconnect()


def route(request: WSUpgradeRequest) -> EchoListener | WSUpgradeResponseWithListener:
    if request.path == b"/health":
        return WSUpgradeResponseWithListener(WSUpgradeResponse.create_ok_response(b'{"status":"healthy"}'), None)
    return EchoListener()


async def serve(port: int) -> None:
    server = await ws_create_server(route, "127.0.0.1", port, backlog=4096)
    await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    uvloop.run(serve(parser.parse_args().port))
