"""What the default transport's fast paths buy: server CPU per WebSocket step and per MCP call, with them on and off.

Serves echo with `envkit serve` twice (`ENVKIT_FAST_PATHS` unset, then `0`), drives it from this process over raw
sockets (one session; `STEPS` steps, then an MCP episode of `CALLS` echo calls on one kept-alive connection), and reads the
server process's CPU time (user + system, /proc) around each part: the client's own work is not counted. Prints
microseconds of server CPU per step and per call, the median of `ROUNDS` rounds.

    python benchmarks/fast_paths_cpu.py
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import raw_ws  # noqa: E402

from envkit.testing import ServedProcess  # noqa: E402

STEPS, CALLS, ROUNDS = 3000, 2000, 5
TICKS = os.sysconf("SC_CLK_TCK")


def server_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def steps(url: str) -> None:
    with raw_ws.open_websocket(url) as sock:
        sock.sendall(raw_ws.frame(b'{"type": "reset"}'))
        raw_ws.read_frame(sock)
        message = raw_ws.frame(json.dumps({"type": "step", "data": {"message": "hi"}}).encode())
        for _ in range(STEPS):
            sock.sendall(message)
            raw_ws.read_frame(sock)


def mcp_request(name: str, **arguments: object) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}}).encode()
    return (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"accept: application/json, text/event-stream\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))


def answer(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, rest = data.split(b"\r\n\r\n", 1)
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(rest) < length:
        rest += sock.recv(65536)
    return rest


def calls(url: str) -> None:
    """One episode's MCP calls: a reset, then `CALLS` echo calls on the same kept-alive connection."""
    with socket.create_connection(raw_ws.address(url)) as sock:
        sock.sendall(mcp_request("reset"))
        episode = json.loads(answer(sock))["result"]["structuredContent"]["episode_id"]
        request = mcp_request("echo", episode_id=episode, message="hi")
        for _ in range(CALLS):
            sock.sendall(request)
            answer(sock)


def per_unit_us(pid: int, work: Callable[[str], None], url: str, count: int) -> float:
    started = server_cpu_s(pid)
    work(url)
    return (server_cpu_s(pid) - started) / count * 1e6


def main() -> None:
    for label, env in (("fast paths on", {}), ("ENVKIT_FAST_PATHS=0", {"ENVKIT_FAST_PATHS": "0"})):
        with ServedProcess("echo", env=env) as served:
            assert served.process is not None
            pid = served.process.pid
            step_us = [per_unit_us(pid, steps, served.url, STEPS) for _ in range(ROUNDS)]
            call_us = [per_unit_us(pid, calls, served.url, CALLS) for _ in range(ROUNDS)]
        print(f"{label:22} step {statistics.median(step_us):6.1f} µs server CPU   MCP call "
              f"{statistics.median(call_us):6.1f} µs   (rounds: {', '.join(f'{v:.0f}' for v in step_us)} / "
              f"{', '.join(f'{v:.0f}' for v in call_us)})")


if __name__ == "__main__":
    main()
