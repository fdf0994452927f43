"""A client that sends large steps and never reads its replies must not grow the server without bound."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import raw_ws

from envkit import EnvClient
from envkit.testing import ServedProcess


STEP_BYTES = 512 << 10
GIVE_UP_AFTER = 256 << 20   # the server has clearly not stopped reading


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_client_that_never_reads_is_not_read_either() -> None:
    with ServedProcess("echo") as served:
        assert served.process is not None
        pid = served.process.pid
        hog = raw_ws.open_websocket(served.url)
        hog.sendall(raw_ws.frame(b'{"type":"reset"}'))
        before = rss_bytes(pid)
        step = raw_ws.frame(json.dumps({"type": "step", "data": {"message": "a" * STEP_BYTES}}).encode())
        hog.settimeout(2.0)
        sent = 0
        try:
            while sent < GIVE_UP_AFTER:   # until the server stops reading and our sends block
                hog.sendall(step)
                sent += len(step)
        except socket.timeout:
            pass
        grown = rss_bytes(pid) - before
        print(f"sent {sent / 2**20:.0f} MiB before the server stopped reading; server RSS grew {grown / 2**20:.0f} MiB")
        assert sent < 64 << 20
        assert grown < 128 << 20
        with EnvClient(served.url).sync() as env:   # everyone else is served meanwhile
            env.reset()
            assert env.step({"message": "still here"}).observation["echoed_message"] == "still here"
        hog.close()


def test_frames_sent_in_a_burst_to_a_slow_environment_are_all_answered_in_order(counter_url: str) -> None:
    """Past a few frames waiting, the server stops reading the connection until they are answered, then reads on."""
    sock = raw_ws.open_websocket(counter_url)
    with sock:
        frames = [raw_ws.frame(b'{"type":"reset"}')]
        frames += [raw_ws.frame(json.dumps({"type": "step", "data": {"amount": 1, "sleep_s": 0.001}}).encode())
                   for _ in range(200)]
        sock.sendall(b"".join(frames))
        reader = sock.makefile("rb")
        totals = []
        for _ in range(201):
            head = reader.read(2)
            size = head[1] & 0x7F
            if size == 126:
                size = int.from_bytes(reader.read(2), "big")
            reply = json.loads(reader.read(size))
            totals.append(reply["data"]["observation"]["total"])
        assert totals == list(range(201))
