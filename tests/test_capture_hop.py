"""The capture proxy's hop on a kept-alive connection: what it sends, it sends at once.

uvicorn writes a response's head and body in two sends. On a socket with Nagle's algorithm on, the body waits for
the client's acknowledgement of the head, which clients delay by up to 40 ms: every call on a kept-alive
connection paid that. These tests read the option on the accepting end of real connections (found among this
process's own descriptors, since the proxy and the relay run here), for the proxy's TCP listener and for the
in-sandbox relay (`envkit.agents.forward`, run here in a thread between a TCP client and the proxy's unix socket).
No timer: the figures are in benchmarks/capture_latency.py.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
from typing import Iterator

import pytest

from capture_model import InstantEngine, tiny_echo
from envkit.agents import forward
from envkit.capture import CaptureProxy

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CaptureProxy]:
    folder = tmp_path_factory.mktemp("hop")
    with CaptureProxy(InstantEngine(tiny_echo().tokenizer), unix_socket=folder / "proxy.sock") as proxy:
        yield proxy


def accepting_end(client: socket.socket) -> socket.socket:
    """The accepted socket at the other end of `client`'s TCP connection, among this process's descriptors."""
    own = client.getsockname()
    for name in os.listdir("/proc/self/fd"):
        try:
            candidate = socket.socket(fileno=os.dup(int(name)))
        except OSError:
            continue
        try:
            if candidate.family == socket.AF_INET and candidate.getpeername() == own:
                return candidate
        except OSError:
            pass
        candidate.close()
    raise AssertionError(f"no socket here is connected to {own}")


def kept_alive_calls(port: int, key: str, count: int) -> http.client.HTTPConnection:
    """`count` chat calls on one kept-alive connection to 127.0.0.1:`port`; the connection, still open."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}]})
    for _ in range(count):
        connection.request("POST", "/v1/chat/completions", body, {"Authorization": f"Bearer {key}",
                                                                  "Content-Type": "application/json"})
        answer = connection.getresponse()
        assert answer.status == 200 and json.loads(answer.read())["choices"][0]["message"]["content"] == "Done."
        assert not answer.will_close
    return connection


def test_the_proxy_sends_without_waiting_on_kept_alive_connections(proxy: CaptureProxy) -> None:
    session = proxy.open_session(max_calls=3)
    assert proxy.url is not None
    connection = kept_alive_calls(int(proxy.url.split(":")[2].split("/")[0]), session.api_key, 3)
    assert connection.sock is not None
    with accepting_end(connection.sock) as accepted:
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), "Nagle's algorithm is on"
    connection.close()
    assert session.calls == 3


def test_the_sandbox_relay_sends_without_waiting(proxy: CaptureProxy) -> None:
    """The relay between an agent (TCP, in the sandbox) and the proxy's unix socket, on a kept-alive connection."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def relay() -> None:
        try:
            forward.serve(listener, str(proxy.unix_socket))
        except OSError:   # the listener shut at the end of the test
            pass

    threading.Thread(target=relay, daemon=True).start()
    session = proxy.open_session(max_calls=3)
    connection = kept_alive_calls(listener.getsockname()[1], session.api_key, 3)
    assert connection.sock is not None
    with accepting_end(connection.sock) as accepted:
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), "Nagle's algorithm is on in the relay"
    connection.close()
    listener.shutdown(socket.SHUT_RDWR)
    listener.close()
    assert session.calls == 3
