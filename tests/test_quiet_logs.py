"""Client input never puts a traceback in the server's log, and an attack shows as one WARNING line per kind."""

from __future__ import annotations

import re
import time
from collections import Counter

import httpx
import pytest
import raw_ws

from envkit import EnvClient
from envkit.testing import ServedProcess


ROUNDS = 20
LIMIT = 256   # RLIMIT_NOFILE of the flooded server


def misbehave(url: str) -> None:
    """ROUNDS of every kind of bad input, each on a connection of its own, beside well-behaved sessions."""
    for _ in range(ROUNDS):
        for payload in (b"\xff\xfe not UTF-8", b"{not json"):
            with raw_ws.open_websocket(url) as sock:
                sock.sendall(raw_ws.frame(payload))
                sock.recv(1000)
        for broken in (raw_ws.frame(b'{"type":"reset"}', mask=False), raw_ws.frame(b"x", opcode=0x3)):
            with raw_ws.open_websocket(url) as sock:
                sock.sendall(broken)
                raw_ws.read_response(sock)
        for request in (b"BLAH\r\n\r\n", b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                        b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * (100 << 10)):
            with raw_ws.connect(url) as sock:
                try:
                    sock.sendall(request)
                except OSError:
                    pass
                raw_ws.read_head(sock)
        with EnvClient(url).sync() as env:
            env.reset()


def test_bad_input_is_counted_and_logged_once_per_kind_without_tracebacks() -> None:
    with ServedProcess("echo", "--log-level", "info") as served:
        misbehave(served.url)
        metrics = httpx.get(served.url + "/metrics", trust_env=False).text
        with EnvClient(served.url).sync() as env:   # the server carries on
            env.reset()
            assert env.step({"message": "fine"}).observation["echoed_message"] == "fine"
        served.terminate()
    log = "".join(served.output)
    assert "Traceback" not in log and not re.search(r"^(ERROR|CRITICAL)", log, re.M), log[-3000:]
    warnings = Counter(re.findall(r"bad client input \((\w+)\)", log))
    assert warnings and max(warnings.values()) == 1, warnings   # one line per kind, however many times it came
    assert '"WebSocket /ws" [accepted]' not in log and "New connection accepted" not in log  # no line per connection
    assert "connection open" not in log and "connection closed" not in log and "connection rejected" not in log
    counted = dict(re.findall(r'envkit_bad_input_total\{kind="(\w+)"\} (\d+)', metrics))
    assert int(counted["invalid_json"]) >= ROUNDS
    assert int(counted["bad_frame"]) >= ROUNDS
    assert int(counted["handshake_too_big"]) == ROUNDS
    assert int(counted["invalid_utf8"]) >= ROUNDS
    assert set(warnings) <= set(counted)


def test_running_out_of_file_descriptors_is_not_logged_per_connection() -> None:
    """A flood of idle connections far past the server's RLIMIT_NOFILE (`LIMIT`): `envkit.transport.listener` keeps them
    below its cap (the limit less the descriptors open at start and a reserve of 64), closes stalled ones (503)
    and leaves the rest in the listen queue. Each of those is said in one WARNING line, not one per connection,
    and once the flood is gone clients are served again. (At a limit of 64 the reserve leaves room for one
    connection, and a closed flood leaves the listen queue one connection per look, every 0.1 s.)"""
    served = ServedProcess("echo", "--log-level", "info")
    served.command = ["bash", "-c", f'ulimit -n {LIMIT} && exec "$@"', "bash", *served.command]
    with served:
        flood = []
        for _ in range(LIMIT + 150):
            try:
                flood.append(raw_ws.connect(served.url, timeout=2))
            except OSError:
                pass
        time.sleep(1.0)
        for sock in flood:
            sock.close()
        time.sleep(0.5)
        with EnvClient(served.url).sync() as env:   # once the flood is gone, clients are served again
            assert env.reset().reward == 0.0
        served.terminate()
    log = "".join(served.output)
    assert "Traceback" not in log and not re.search(r"^(ERROR|CRITICAL)", log, re.M), log[-3000:]
    assert log.count("the most this server keeps") == 1, log[-3000:]   # the flood reached the cap, said once
    assert log.count("handshake_evicted") <= 1, log[-3000:]
    assert len(log.splitlines()) < 30, log[-3000:]


def test_rate_limited_lines_say_how_many_were_held_back(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from envkit.core.quiet_log import RateLimitedLog

    caplog.set_level(logging.INFO, logger="envkit.test")
    log = RateLimitedLog(logging.getLogger("envkit.test"), interval_s=0.2)
    for _ in range(5):
        log.warning("a", "kind a: %s", "x")
    log.log(logging.INFO, "b", "kind b")
    time.sleep(0.25)
    log.warning("a", "kind a: %s", "y")
    assert [(record.levelname, record.getMessage()) for record in caplog.records] == [
        ("WARNING", "kind a: x"), ("INFO", "kind b"),
        ("WARNING", "kind a: y (and 4 more like it since the last such line; at most one per 0.2s)")]
