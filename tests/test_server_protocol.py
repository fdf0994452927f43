"""The wire protocol over a real server and a plain `websockets` client (not envkit's)."""

from __future__ import annotations

import contextlib
import json
import logging
import time

import pytest
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK
from websockets.sync.client import connect

from envkit.client import websocket_url
from envkit.protocol import SESSION_ID_HEADER


def ws(url: str):
    return connect(websocket_url(url), proxy=None)


def ask(sock, frame) -> dict:
    sock.send(frame if isinstance(frame, str) else json.dumps(frame))
    return json.loads(sock.recv(timeout=10))


def test_echo_episode_over_raw_protocol(echo_url: str) -> None:
    with ws(echo_url) as sock:
        assert sock.response.headers[SESSION_ID_HEADER]
        reply = ask(sock, {"type": "reset", "data": {"seed": 1}})
        assert reply == {"type": "observation", "data": {
            "observation": {"echoed_message": "Echo environment ready!", "message_length": 0, "metadata": {}},
            "reward": 0.0, "done": False}}
        reply = ask(sock, {"type": "step", "data": {"message": "hello"}})
        assert reply["type"] == "observation"
        assert reply["data"]["observation"]["echoed_message"] == "hello"
        assert reply["data"]["reward"] == pytest.approx(0.5)
        assert reply["data"]["done"] is False
        state = ask(sock, {"type": "state"})
        assert state["type"] == "state" and state["data"]["step_count"] == 1
        tool = ask(sock, {"type": "call", "data": {"tool": "echo", "args": {"message": "hey"}}})
        assert tool["type"] == "tool_result"
        assert tool["data"]["result"] == "hey" and tool["data"]["reward"] == pytest.approx(0.3)
        sock.send(json.dumps({"type": "close"}))
        with pytest.raises(ConnectionClosedOK) as closed:
            sock.recv(timeout=10)
        assert closed.value.rcvd.code == 1000


BAD_FRAMES = [
    ("{not json", "INVALID_JSON", "Invalid JSON"),
    ('["reset"]', "VALIDATION_ERROR", 'string "type"'),
    ({"type": "jump"}, "UNKNOWN_TYPE", "Unknown message type: jump"),
    ({"type": "step", "data": {"amount": "lots"}}, "VALIDATION_ERROR", "amount"),
    ({"type": "step", "data": {"amount": 1, "colour": "red"}}, "VALIDATION_ERROR", "colour"),
    ({"type": "step", "data": [1, 2]}, "VALIDATION_ERROR", "must be a JSON object"),
    ({"type": "step", "data": {"fail": True}}, "EXECUTION_ERROR", "the counter was asked to fail"),
    ({"type": "reset", "data": "seed=1"}, "VALIDATION_ERROR", "keyword arguments"),
    ({"type": "call", "data": {"tool": "fly", "args": {}}}, "UNKNOWN_TOOL", "add, peek"),
    ({"type": "call", "data": {"tool": "add", "args": {"amount": "x"}}}, "VALIDATION_ERROR", "amount"),
    ({"type": "call", "data": {"tool": "add", "args": {}}}, "VALIDATION_ERROR", "amount"),
    ({"type": "call", "data": {"tool": "add", "args": [1]}}, "VALIDATION_ERROR", '"args"'),
    ({"type": "call", "data": "add"}, "VALIDATION_ERROR", '"tool"'),
    ("x" * 5000, "MESSAGE_TOO_BIG", "exceeds the server's limit of 4096 bytes"),
]


@pytest.mark.parametrize("frame, code, text", BAD_FRAMES, ids=[case[1] + str(i) for i, case in enumerate(BAD_FRAMES)])
def test_bad_frame_gets_error_and_session_carries_on(counter_url: str, frame, code: str, text: str) -> None:
    with ws(counter_url) as sock, ws(counter_url) as neighbour:
        ask(sock, {"type": "reset", "data": {"tag": "mine"}})
        ask(neighbour, {"type": "reset", "data": {"tag": "theirs"}})
        ask(sock, {"type": "step", "data": {"amount": 2}})
        reply = ask(sock, frame)
        assert reply["type"] == "error"
        assert reply["data"]["code"] == code
        assert text in reply["data"]["message"]
        # the same session goes on, with its state intact, and so does its neighbour
        after = ask(sock, {"type": "step", "data": {"amount": 3}})
        assert after["data"]["observation"]["total"] == 5
        assert after["data"]["observation"]["tag"] == "mine"
        assert ask(neighbour, {"type": "step", "data": {"amount": 1}})["data"]["observation"]["total"] == 1


def test_step_and_call_before_reset_are_refused(counter_url: str) -> None:
    with ws(counter_url) as sock:
        reply = ask(sock, {"type": "step", "data": {"amount": 1}})
        assert reply["data"]["code"] == "NOT_RESET" and "reset" in reply["data"]["message"]
        reply = ask(sock, {"type": "call", "data": {"tool": "peek"}})
        assert reply["data"]["code"] == "NOT_RESET"
        assert ask(sock, {"type": "reset"})["type"] == "observation"
        assert ask(sock, {"type": "call", "data": {"tool": "peek"}})["data"]["result"] == "total is 0"


def test_validation_error_lists_the_fields(counter_url: str) -> None:
    with ws(counter_url) as sock:
        ask(sock, {"type": "reset"})
        reply = ask(sock, {"type": "step", "data": {"amount": "lots", "sleep_s": -1}})
        locations = sorted(tuple(error["loc"]) for error in reply["data"]["errors"])
        assert locations == [("amount",), ("sleep_s",)]


def test_reset_arguments_reach_a_reset_that_takes_any(counter_url: str) -> None:
    with ws(counter_url) as sock:
        reply = ask(sock, {"type": "reset", "data": {"tag": "t1", "prompt": "dataset column"}})
        assert reply["data"]["observation"]["tag"] == "t1"


def test_reset_arguments_the_environment_does_not_take_are_refused_by_name() -> None:
    from sample_envs import CounterAction, CounterObservation, StrictResetEnvironment

    from envkit import create_app
    from envkit.testing import running_server

    app = create_app(StrictResetEnvironment, CounterAction, CounterObservation)
    with running_server(app) as url, ws(url) as sock:
        reply = ask(sock, {"type": "reset", "data": {"tga": "t1"}})
        assert reply["data"]["code"] == "VALIDATION_ERROR"
        assert reply["data"]["message"] == ("Invalid reset: StrictResetEnvironment.reset() takes no argument 'tga' "
                                            "(did you mean 'tag'?); it takes episode_id, seed, tag")
        assert ask(sock, {"type": "reset", "data": {"tag": "t2"}})["data"]["observation"]["tag"] == "t2"


def test_environment_returning_a_non_observation_is_an_execution_error() -> None:
    from sample_envs import BadObservationEnvironment, CounterAction, CounterObservation

    from envkit import create_app
    from envkit.testing import running_server

    app = create_app(BadObservationEnvironment, CounterAction, CounterObservation)
    with running_server(app) as url, ws(url) as sock:
        ask(sock, {"type": "reset"})
        reply = ask(sock, {"type": "step", "data": {}})
        assert reply["data"]["code"] == "EXECUTION_ERROR"
        assert "expected an Observation" in reply["data"]["message"]


def test_http_routes_describe_the_environment(counter_url: str) -> None:
    import httpx

    with httpx.Client(base_url=counter_url, trust_env=False) as http:
        assert http.get("/health").json() == {"status": "healthy", "active_sessions": 0, "max_sessions": 8}
        schema = http.get("/schema").json()
        assert set(schema) == {"action", "observation", "state"}
        assert "amount" in schema["action"]["properties"]
        metadata = http.get("/metadata").json()
        assert metadata["name"] == "CounterEnvironment" and metadata["tools"] == ["add", "peek"]
        tools = {t["function"]["name"]: t for t in http.get("/tools").json()["tools"]}
        assert tools["add"]["function"]["parameters"]["required"] == ["amount"]
        # no stateless /step
        assert http.post("/step", json={"action": {}}).status_code in (404, 405)


def test_text_feature_in_the_handshake_adds_rendered_text(echo_url: str) -> None:
    ws_url = websocket_url(echo_url)
    with connect(ws_url, proxy=None, additional_headers={"x-envkit-features": "other, text"}) as sock:
        assert ask(sock, {"type": "reset"})["data"]["text"] == "Echo environment ready!"
        assert ask(sock, {"type": "step", "data": {"message": "hi"}})["data"]["text"] == "hi"
    with ws(echo_url) as plain:
        assert "text" not in ask(plain, {"type": "reset"})["data"]


def test_text_feature_in_the_query_string_serves_browsers(echo_url: str) -> None:
    """Browsers cannot set WebSocket handshake headers, so `/ws?features=text` asks the same."""
    with connect(websocket_url(echo_url) + "?api_key=k&features=text", proxy=None) as sock:
        assert ask(sock, {"type": "reset"})["data"]["text"] == "Echo environment ready!"
        assert ask(sock, {"type": "step", "data": {"message": "hi"}})["data"]["text"] == "hi"
    with connect(websocket_url(echo_url) + "?features=other", proxy=None) as plain:
        assert "text" not in ask(plain, {"type": "reset"})["data"]


@pytest.mark.parametrize("env_name", ["echo (answered on the event loop)", "counter (answered on worker threads)"])
def test_frames_sent_without_waiting_are_answered_in_order(echo_url: str, counter_url: str, env_name: str) -> None:
    url, step, read = ((echo_url, lambda i: {"message": "m" * i}, lambda obs: obs["message_length"])
                       if env_name.startswith("echo") else
                       (counter_url, lambda i: {"amount": 1}, lambda obs: obs["total"]))
    with ws(url) as sock:
        sock.send(json.dumps({"type": "reset"}))
        for i in range(1, 31):
            sock.send(json.dumps({"type": "step", "data": step(i)}))
        sock.send(json.dumps({"type": "close"}))
        assert json.loads(sock.recv(timeout=10))["type"] == "observation"
        assert [read(json.loads(sock.recv(timeout=10))["data"]["observation"]) for _ in range(30)] == list(range(1, 31))
        with pytest.raises(ConnectionClosedOK) as closed:
            sock.recv(timeout=10)
        assert closed.value.rcvd.code == 1000


def test_messages_after_close_reach_no_environment() -> None:
    """A client that sends `close` and more frames at once: the session ends at `close`, and the environment
    is never called again (the frames after it are dropped, whatever arrives in the same read)."""
    from sample_envs import CounterAction, CounterObservation, RecordingEnvironment

    from envkit import create_app
    from envkit.testing import running_server

    RecordingEnvironment.calls = []
    app = create_app(RecordingEnvironment, CounterAction, CounterObservation, max_concurrent_envs=2)
    with running_server(app) as url:
        with ws(url) as sock:
            assert ask(sock, {"type": "reset"})["type"] == "observation"
            frames = [json.dumps({"type": "close"})] + [json.dumps({"type": "step", "data": {"amount": 1}})] * 20
            with sock.protocol_mutex:   # all of them in one write, so the server reads them together
                for frame in frames:
                    sock.protocol.send_text(frame.encode())
                sock.socket.sendall(b"".join(sock.protocol.data_to_send()))
            with contextlib.suppress(ConnectionClosed):
                sock.recv(timeout=10)
        deadline = time.monotonic() + 10
        while "close" not in RecordingEnvironment.calls and time.monotonic() < deadline:
            time.sleep(0.02)
    assert RecordingEnvironment.calls == ["reset", "close"]


def test_a_client_still_sending_when_the_server_closes_reads_every_reply_and_the_close_code(
        echo_url: str) -> None:
    """The server ends the session at `close` while more frames are on their way: the client still reads the
    replies sent before, then a clean 1000 (the connection is not reset under it)."""
    with ws(echo_url) as sock:
        sock.send(json.dumps({"type": "reset"}))
        sock.send(json.dumps({"type": "close"}))
        with contextlib.suppress(ConnectionClosed):
            for _ in range(20):
                sock.send(json.dumps({"type": "step", "data": {"message": "late"}}))
        assert json.loads(sock.recv(timeout=10))["type"] == "observation"
        with pytest.raises(ConnectionClosedOK) as closed:
            sock.recv(timeout=10)
        assert closed.value.rcvd.code == 1000


def test_fragmented_frame_is_answered_as_one(counter_url: str) -> None:
    with ws(counter_url) as sock:
        ask(sock, {"type": "reset"})
        sock.send(iter(['{"type": "step", ', '"data": {"amount": ', '7}}']))
        assert json.loads(sock.recv(timeout=10))["data"]["observation"]["total"] == 7


def test_frame_over_the_transport_limit_closes_with_1009(counter_url: str) -> None:
    from websockets.exceptions import ConnectionClosedError

    from envkit.app.asgi import MAX_FRAME_BYTES

    with ws(counter_url) as sock:
        ask(sock, {"type": "reset"})
        with pytest.raises(ConnectionClosedError) as closed:
            sock.send("x" * (MAX_FRAME_BYTES + 1))
            sock.recv(timeout=10)
        # the close frame is lost when the server resets the socket while the client is still sending
        assert closed.value.rcvd is None or closed.value.rcvd.code == 1009
    with ws(counter_url) as other:   # the server carries on
        assert ask(other, {"type": "reset"})["type"] == "observation"
