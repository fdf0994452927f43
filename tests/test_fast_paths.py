"""The default transport's fast paths check what they rely on before the first server starts, and step aside
(one INFO line, uvicorn's and websockets' own code) when it has changed: the server still serves, correctly.

Each "changed internal" below is simulated by monkeypatching the real uvicorn or websockets code a fast path
relies on, as a new release could change it; nothing else is mocked (real servers, sockets and clients)."""

from __future__ import annotations

import json
import socket
from typing import Any, Iterator

import httpx
import pytest
import raw_ws
import uvicorn
import websockets
from conftest import needs_fast_path
from uvicorn.protocols.http.httptools_impl import STATUS_LINE
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

import envkit.transport.fast.at_once
import envkit.transport.fast.frames
from envkit import ConfigurationError, create_app
from envkit.transport.fast import FastPaths, decide_again, fast_paths
from envkit.app.targets import resolve_target
from envkit.testing import running_server

OFF_LINE = "envkit fast paths off"


@pytest.fixture(autouse=True)
def checked_afresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test decides the fast paths anew (whatever `ENVKIT_FAST_PATHS` the run has), and leaves them to be
    decided anew (after its monkeypatches)."""
    monkeypatch.delenv("ENVKIT_FAST_PATHS", raising=False)
    decide_again()
    yield
    decide_again()


def echo_app() -> Any:
    target = resolve_target("echo")
    return create_app(target.env_class, target.action_cls, target.observation_cls, max_concurrent_envs=8)


def on_here(name: str) -> dict[str, bool]:
    """Skip where the fast path `name` is off already (older uvicorn or websockets): there is nothing to turn off.
    Returns which paths are on here, as `turned_on`."""
    needs_fast_path(name)
    here = turned_on(fast_paths())
    decide_again()   # decided again after the test's monkeypatches
    return here


def turned_on(paths: FastPaths) -> dict[str, bool]:
    return {"frames": paths.frames, "inline": paths.inline, "at_once": paths.at_once}


def off_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The lines saying which fast paths are off, in what the server logged (uvicorn's handler, on stderr)."""
    return [line for line in capsys.readouterr().err.splitlines() if OFF_LINE in line]


def ws_episode(url: str, fragmented: bool = False) -> list[str]:
    """A reset and two steps over a raw socket (one step fragmented, if asked): the echoed messages."""
    echoed = []
    with raw_ws.open_websocket(url) as sock:
        sock.sendall(raw_ws.frame(json.dumps({"type": "reset"}).encode()))
        assert json.loads(raw_ws.read_frame(sock)[1])["type"] == "observation"
        for text in ("first", "second"):
            message = json.dumps({"type": "step", "data": {"message": text}}).encode()
            if fragmented:
                sock.sendall(raw_ws.frame(message[:9], 0x1, fin=False) + raw_ws.frame(message[9:], 0x0))
            else:
                sock.sendall(raw_ws.frame(message))
            echoed.append(json.loads(raw_ws.read_frame(sock)[1])["data"]["observation"]["echoed_message"])
    return echoed


def pipelined_health(url: str) -> list[bytes]:
    """Two requests in one write, through uvicorn's cycle: the status lines of both answers."""
    host, port = raw_ws.address(url)
    request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(request * 2)
        data = b""
        while data.count(b"HTTP/1.1 ") < 2 or not data.endswith(b"}"):
            chunk = sock.recv(65536)
            assert chunk, f"the server closed the connection after {data!r}"
            data += chunk
    return [b"HTTP/1.1 " + answer.split(b"\r\n")[0] for answer in data.split(b"HTTP/1.1 ")[1:]]


def mcp_reset(url: str) -> dict[str, Any]:
    """An MCP reset: its answer, checked to be a whole response (status, uvicorn's headers, its type)."""
    with httpx.Client(base_url=url, trust_env=False) as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "reset", "arguments": {}}}
        response = http.post("/mcp", json=body)
    assert (response.reason_phrase, response.headers.get("server")) == ("OK", "uvicorn"), response.headers
    assert "date" in response.headers and response.headers["content-type"].startswith("application/json")
    return response.json()


def test_every_fast_path_is_on_with_the_releases_it_was_written_against() -> None:
    """uvicorn 0.50 and websockets 16 or later (what `pip install -e ".[all]"` brings): every check passes, and nothing
    is logged. Older releases leave some off by themselves (the run at the floors shows which)."""
    def release(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split(".")[:2])

    if release(uvicorn.__version__) < (0, 50) or release(websockets.__version__) < (16, 0):
        pytest.skip(f"uvicorn {uvicorn.__version__}, websockets {websockets.__version__}")
    paths = fast_paths()
    assert paths == FastPaths(frames=True, inline=True, at_once=True), paths.describe()
    assert paths.describe() is None


def test_envkit_fast_paths_0_turns_every_one_off_and_says_so(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ENVKIT_FAST_PATHS", "0")
    with running_server(echo_app(), log_level="info") as url:
        assert fast_paths() == FastPaths(off=(("all", "ENVKIT_FAST_PATHS=0"),))
        assert ws_episode(url, fragmented=True) == ["first", "second"]
        assert mcp_reset(url)["result"]["isError"] is False
        assert len(pipelined_health(url)) == 2
    assert len(off_lines(capsys)) == 1


def test_envkit_fast_paths_may_name_the_paths_to_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ENVKIT_FAST_PATHS=inline,at_once` uses those two and says why the other is off; frames without inline is off
    too; a name that is no fast path is one line naming it."""
    monkeypatch.setenv("ENVKIT_FAST_PATHS", "inline, at_once")
    assert fast_paths() == FastPaths(inline=True, at_once=True, off=(("frames", "not in ENVKIT_FAST_PATHS"),))
    decide_again()
    monkeypatch.setenv("ENVKIT_FAST_PATHS", "frames")
    left_out = "not in ENVKIT_FAST_PATHS"
    assert fast_paths() == FastPaths(off=(("inline", left_out), ("at_once", left_out),
                                          ("frames", "it needs inline answers")))
    decide_again()
    monkeypatch.setenv("ENVKIT_FAST_PATHS", "inline,repeat")
    with pytest.raises(ConfigurationError, match="^ENVKIT_FAST_PATHS='inline,repeat' names no fast path repeat; use 0, "
                                                 "1 or names among inline, frames, at_once$"):
        fast_paths()


def test_a_changed_apply_mask_turns_the_frame_reader_off_and_frames_are_read_right(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """websockets' `apply_mask`, as the fast path `frames` uses it, changed to return the payload still masked: the check sees
    the frame misread, websockets reads every frame, and the echoed messages are the ones sent."""
    here = on_here("frames")
    monkeypatch.setattr(envkit.transport.fast.frames, "apply_mask", lambda data, mask: bytes(data))
    with running_server(echo_app(), log_level="info") as url:
        assert ws_episode(url) == ["first", "second"]
    paths = fast_paths()
    assert turned_on(paths) == {**here, "frames": False}
    [line] = off_lines(capsys)
    assert "frames: FastPathBroken: FrameReader read" in line


def _renamed_message_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn's sans-I/O protocol gathering a message in `parts` instead of `frames` (as 0.35 gathered it in
    `bytes`)."""
    def handle_cont(self: Any, event: Any) -> None:
        self.parts.append(event.data)
        if event.fin:
            self.send_receive_event_to_app()

    def handle_start(kind: str) -> Any:
        def handle(self: Any, event: Any) -> None:
            self.curr_msg_data_type, self.parts = kind, [event.data]
            if event.fin:
                self.send_receive_event_to_app()
        return handle

    def send_receive_event_to_app(self: Any) -> None:
        data, self.parts = b"".join(self.parts), []
        if self.curr_msg_data_type == "text":
            self.queue.put_nowait({"type": "websocket.receive", "text": data.decode()})
        else:
            self.queue.put_nowait({"type": "websocket.receive", "bytes": data})

    monkeypatch.setattr(WebSocketsSansIOProtocol, "handle_cont", handle_cont)
    monkeypatch.setattr(WebSocketsSansIOProtocol, "handle_text", handle_start("text"))
    monkeypatch.setattr(WebSocketsSansIOProtocol, "handle_bytes", handle_start("bytes"))
    monkeypatch.setattr(WebSocketsSansIOProtocol, "send_receive_event_to_app", send_receive_event_to_app)


def test_a_changed_uvicorn_message_buffer_turns_inline_answers_off_and_sessions_carry_on(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    here = on_here("inline")
    _renamed_message_buffer(monkeypatch)
    with running_server(echo_app(), log_level="info") as url:
        assert ws_episode(url, fragmented=True) == ["first", "second"]
        assert ws_episode(url) == ["first", "second"]
    paths = fast_paths()
    assert turned_on(paths) == {**here, "frames": False, "inline": False}
    [line] = off_lines(capsys)
    assert "inline: " in line and "frames: it needs inline answers" in line


def test_a_changed_status_line_turns_answers_at_once_off_and_every_response_is_well_formed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """uvicorn's `STATUS_LINE`, as the fast path `at_once` uses it, changed to lines without their CRLF (uvicorn adding it
    elsewhere): the check sees a malformed response, and uvicorn's cycle answers every request."""
    here = on_here("at_once")
    monkeypatch.setattr(envkit.transport.fast.at_once, "STATUS_LINE", {status: line.rstrip(b"\r\n")
                                                             for status, line in STATUS_LINE.items()})
    with running_server(echo_app(), log_level="info") as url:
        for _ in range(3):   # a first call, then repeats
            assert mcp_reset(url)["result"]["isError"] is False
        assert pipelined_health(url) == [b"HTTP/1.1 200 OK"] * 2
    paths = fast_paths()
    assert turned_on(paths) == {**here, "at_once": False}
    [line] = off_lines(capsys)
    assert "at_once: FastPathBroken: a response began" in line
