"""Clients that break the rules on purpose, over raw sockets: no request can take a slot it does not use,
grow the server without bound or hold its file descriptors, and every other client carries on."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
import raw_ws
from websockets.sync.client import connect

from envkit import EnvClient, create_app
from envkit.client import websocket_url
from envkit.app.targets import resolve_target
from envkit.testing import running_server
from envkit.transport.uvicorn_protocols import HeadLimits


def echo_app(**settings):
    target = resolve_target("echo")
    return create_app(target.env_class, target.action_cls, target.observation_cls, **settings)


def health(url: str) -> dict:
    return httpx.get(url + "/health", timeout=10, trust_env=False).json()


def test_plain_http_requests_to_ws_take_no_slot() -> None:
    with running_server(echo_app(max_concurrent_envs=8)) as url:
        for _ in range(8):
            with raw_ws.connect(url) as sock:   # what `curl http://HOST:PORT/ws` sends
                sock.sendall(b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n")
                status = raw_ws.read_head(sock).split(b" ", 2)[1]
                assert status in (b"400", b"404"), status
        assert health(url)["active_sessions"] == 0
        with EnvClient(url).sync() as env:   # every slot is still free
            assert env.reset().reward == 0.0


def test_the_message_limit_counts_bytes_not_characters(echo_url: str) -> None:
    with connect(websocket_url(echo_url), proxy=None, max_size=None) as sock:
        sock.send(json.dumps({"type": "reset"}))
        sock.recv(timeout=10)
        sock.send(json.dumps({"type": "step", "data": {"message": "🙂" * 1_000_000}}, ensure_ascii=False))  # 4 MB
        reply = json.loads(sock.recv(timeout=30))
        assert reply["data"]["code"] == "MESSAGE_TOO_BIG"
        assert "message of 4000041 bytes exceeds the server's limit of 1048576 bytes" in reply["data"]["message"]
        sock.send(json.dumps({"type": "step", "data": {"message": "🙂" * 250_000}}, ensure_ascii=False))  # 1 MB
        reply = json.loads(sock.recv(timeout=30))
        assert reply["data"]["observation"]["message_length"] == 250_000


def test_an_endless_handshake_header_is_cut_off() -> None:
    """A 16 MiB header line must not be read in full: the server answers 431 past 64 KiB."""
    with running_server(echo_app()) as url:
        with raw_ws.connect(url) as sock:
            sock.sendall(b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: ")
            sent, chunk = 0, b"a" * 65536
            with pytest.raises(OSError):   # the server closes the connection: sending fails
                while sent < 16 << 20:
                    sock.sendall(chunk)
                    sent += len(chunk)
                    time.sleep(0.001)
                pytest.fail(f"the server read {sent} bytes of one header line")
            assert sent < 8 << 20
        with EnvClient(url).sync() as env:
            assert env.reset().reward == 0.0
        with raw_ws.connect(url) as sock:
            try:
                sock.sendall(b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * (100 << 10))
            except OSError:
                pass
            assert raw_ws.read_head(sock).startswith(b"HTTP/1.1 431")


def test_a_large_body_sent_with_its_head_is_not_taken_for_a_long_head() -> None:
    """The head limit counts the head only: a 300 KB JSON-RPC body arriving in the same read reaches the app."""
    with running_server(echo_app()) as url:
        payload = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "a" * 300_000}}).encode()
        with raw_ws.connect(url) as sock:
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Accept: application/json, text/event-stream\r\n"
                         b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
            status = raw_ws.read_head(sock).split(b" ", 2)[1]
        assert status == b"200"


def test_a_handshake_sent_a_byte_at_a_time_is_timed_out() -> None:
    app = echo_app()
    limits = HeadLimits(app.state.envkit_metrics, head_timeout_s=0.5)
    with running_server(app, head_limits=limits) as url, raw_ws.connect(url) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        response = b""
        for _ in range(50):   # a slowloris: one header byte every 0.1 s, never finishing
            try:
                sock.sendall(b"X")
                time.sleep(0.1)
            except OSError:
                break
        response = raw_ws.read_response(sock)
        assert response.startswith(b"HTTP/1.1 408 Request Timeout")
        assert time.monotonic() - started < 3
        assert app.state.envkit_metrics.bad_input["handshake_timeout"] == 1


def test_stalled_handshakes_beyond_the_limit_make_room_for_new_clients() -> None:
    app = echo_app()
    limits = HeadLimits(app.state.envkit_metrics, max_pending_heads=16, min_evict_age_s=0.5)

    def stall() -> socket.socket:
        sock = raw_ws.connect(url, timeout=5)
        sock.sendall(b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\n")   # half a handshake, never finished
        return sock

    with running_server(app, head_limits=limits) as url:
        old = [stall() for _ in range(16)]
        time.sleep(0.6)
        young = [stall() for _ in range(24)]   # each pushes out one that waited past min_evict_age_s
        time.sleep(0.2)
        with EnvClient(url).sync() as env:   # a well-behaved client gets in while the stalled ones wait
            env.reset()
            assert env.step({"message": "through"}).observation["echoed_message"] == "through"
        answers = []
        for sock in old + young:
            sock.settimeout(0.05)
            try:
                answers.append(sock.recv(100)[:12])
            except socket.timeout:
                answers.append(b"")
            finally:
                sock.close()
        assert answers[:16] == [b"HTTP/1.1 503"] * 16   # the oldest went
        assert answers[16:] == [b""] * 24                # the young ones were not evicted: a burst is not an attack
        assert app.state.envkit_metrics.bad_input["handshake_evicted"] == 16
