"""What each of the default transport's fast paths buys: server CPU per WebSocket step and per MCP call.

Serves echo with `envkit serve` once per set of fast paths (`ENVKIT_FAST_PATHS`: none, each one on its own, with
`frames` on top of `inline`, which it needs, and all), all at once, and drives them in turn, round after round (figures on a shared machine drift), from this process over raw
sockets: one session of `STEPS` steps, then an MCP episode of `CALLS` echo calls on one kept-alive connection. The
server process's CPU time (user + system, /proc) is read around each part, so the client's own work is not counted.
Prints microseconds of server CPU per step and per call (the median of `--rounds` rounds) and each set's saving
against none.

    python benchmarks/fast_paths_cpu.py                       # 0, inline, inline+frames, at_once, all
    python benchmarks/fast_paths_cpu.py --sets 0,inline,all   # chosen sets (ENVKIT_FAST_PATHS values)
"""

from __future__ import annotations

import argparse
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

STEPS, CALLS = 10000, 5000
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="0,inline,inline+frames,at_once,all",
                        help="ENVKIT_FAST_PATHS values to compare, separated by commas (a set of several paths joins "
                             "their names with +)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    sets = args.sets.split(",")
    values = {name: ("1" if name == "all" else name.replace("+", ",")) for name in sets}
    servers = {name: ServedProcess("echo", env={"ENVKIT_FAST_PATHS": value}).start() for name, value in values.items()}
    step_us: dict[str, list[float]] = {name: [] for name in sets}
    call_us: dict[str, list[float]] = {name: [] for name in sets}
    try:
        for _ in range(args.rounds):
            for name, served in servers.items():
                assert served.process is not None
                step_us[name].append(per_unit_us(served.process.pid, steps, served.url, STEPS))
                call_us[name].append(per_unit_us(served.process.pid, calls, served.url, CALLS))
    finally:
        for served in servers.values():
            served.terminate()
    base_step, base_call = (statistics.median(step_us[sets[0]]), statistics.median(call_us[sets[0]]))
    print(f"server CPU, median of {args.rounds} interleaved rounds; saving against ENVKIT_FAST_PATHS={sets[0]}")
    for name in sets:
        step, call = statistics.median(step_us[name]), statistics.median(call_us[name])
        print(f"{name:16} /ws step {step:6.1f} µs ({1 - step / base_step:+5.0%})   MCP call {call:6.1f} µs "
              f"({1 - call / base_call:+5.0%})   rounds: {' '.join(f'{v:.0f}' for v in step_us[name])} / "
              f"{' '.join(f'{v:.0f}' for v in call_us[name])}")


if __name__ == "__main__":
    main()
