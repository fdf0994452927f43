"""`/mcp`: OpenEnv 0.10.0's dialect and standard MCP, driven by the real clients in their own venvs
(OpenEnv's MCPToolClient and `openenv validate`, the `mcp` SDK 1.x and 2.x), and by plain JSON-RPC for
what those clients never send (bad requests, capacity, reaping, sessions that are gone).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from envkit import create_app
from envkit.app.targets import bundled_envs, resolve_target
from envkit.testing import ServedProcess, running_server

PEER = Path(__file__).resolve().parent / "mcp_peer"


def app_for(name: str = "echo", **settings: Any) -> Any:
    target = resolve_target(name)
    return create_app(target.env_class, target.action_cls, target.observation_cls, **settings)


@pytest.fixture
def echo_server() -> Iterator[str]:
    with running_server(app_for(max_concurrent_envs=16)) as url:
        yield url


def run_peer(python: str, script: str, *args: str) -> list[dict]:
    done = subprocess.run([python, str(PEER / script), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


class Rpc:
    """Plain JSON-RPC over HTTP to `/mcp`."""

    def __init__(self, url: str) -> None:
        self.url = url + "/mcp"
        self.http = httpx.Client(trust_env=False, timeout=10)
        self.next_id = 0

    def post(self, body: Any, **kwargs: Any) -> httpx.Response:
        return self.http.post(self.url, **({"json": body} if isinstance(body, (dict, list)) else {"content": body}),
                              **kwargs)

    def __call__(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        response = self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert response.status_code == 200, response.text
        reply = response.json()
        assert reply["jsonrpc"] == "2.0" and reply["id"] == self.next_id
        return reply

    def result(self, method: str, **params: Any) -> Any:
        reply = self(method, **params)
        assert "error" not in reply, reply
        return reply["result"]


def health(url: str) -> dict[str, Any]:
    return httpx.get(url + "/health", trust_env=False).json()


# -- OpenEnv's clients ---------------------------------------------------------------------------------------------


def test_openenv_mcp_tool_client_runs_the_echo_example_and_shares_one_game_with_its_socket(
        openenv_python: str, echo_server: str) -> None:
    lines = run_peer(openenv_python, "openenv_mcp_client.py", echo_server)
    found = {key: value for line in lines for key, value in line.items()}
    assert found["sync_tools"] == ["echo", "echo_message", "echo_with_length"]
    assert found["sync_echo_message"] == "Hello!"                                     # OpenEnv's documented results
    assert found["sync_echo_with_length"] == {"message": "Test", "length": 4}
    assert found["async_reset"]["echoed_message"] == "Echo environment ready!"       # reset over the attached socket
    assert found["async_echo"]["reward"] == pytest.approx(0.9)                       # a tool call over /mcp ...
    assert found["step_count_after"] == 1                                            # ... seen by the socket's state
    assert "Invalid arguments for echo" in found["bad_arguments"] and "wrong" in found["bad_arguments"]
    assert found["after_error"] == "still here"
    assert health(echo_server)["active_sessions"] == 0                               # the client closed its session


def test_openenv_mcp_tool_client_is_refused_at_capacity_and_told_its_reaped_session_is_gone(
        openenv_python: str) -> None:
    with running_server(app_for(max_concurrent_envs=1, session_timeout_s=0.5, capacity_wait_s=0)) as url:
        first, second, after = run_peer(openenv_python, "openenv_capacity.py", url, "0.5")
        assert health(url)["active_sessions"] == 0
    assert first == {"first": "mine"}
    assert "Failed to create MCP session: server at capacity: 1/1" in second["second_refused"]
    assert "is gone: idle timeout" in after["after_reap"]


@pytest.mark.parametrize("name", sorted(bundled_envs()))
def test_openenv_validate_passes_against_envkit_serve(openenv_python: str, name: str) -> None:
    openenv = str(Path(openenv_python).parent / "openenv")
    with ServedProcess(name) as served:
        done = subprocess.run([openenv, "validate", "--url", served.url, "--json"], capture_output=True, text=True,
                              timeout=120)
    report = json.loads(done.stdout)
    assert report["passed"], report
    assert {criterion["id"] for criterion in report["criteria"] if criterion["passed"]} >= {"mcp_endpoint"}
    assert len(report["criteria"]) == 6 and done.returncode == 0


def test_trl_quick_start_steps_echo_without_a_reset(openenv_python: str, echo_server: str) -> None:
    """TRL's `EchoToolEnv` never resets the server; OpenEnv's classic echo client's steps still earn rewards."""
    lines = run_peer(openenv_python, "trl_echo_quickstart.py", echo_server)
    assert lines == [{"text": "hello", "reward": pytest.approx(0.5)},
                     {"text": "a longer message", "reward": pytest.approx(1.6)}]


def test_the_exact_classic_echo_step_frame_before_reset_gets_a_reward(echo_server: str) -> None:
    with connect(echo_server.replace("http", "ws") + "/ws") as socket:
        socket.send('{"type": "step", "data": {"message": "hello"}}')   # OpenEnv's classic EchoEnv.step, no reset
        reply = json.loads(socket.recv())
    assert reply["type"] == "observation" and reply["data"]["reward"] == pytest.approx(0.5)
    assert reply["data"]["observation"]["echoed_message"] == "hello"


def test_games_that_need_a_reset_still_refuse_a_step_before_it() -> None:
    with running_server(app_for("catch")) as url, connect(url.replace("http", "ws") + "/ws") as socket:
        socket.send('{"type": "step", "data": {"action_id": 1}}')
        assert json.loads(socket.recv())["data"]["code"] == "NOT_RESET"
        socket.send('{"type": "call", "data": {"tool": "stay"}}')
        assert json.loads(socket.recv())["data"]["code"] == "NOT_RESET"


# -- the mcp SDK ---------------------------------------------------------------------------------------------------


def test_mcp_sdk_1_and_2_clients_at_once_never_see_each_others_game(mcp1_python: str, mcp2_python: str,
                                                                    echo_server: str) -> None:
    runs = [subprocess.Popen([python, str(PEER / "sdk_episodes.py"), echo_server, "3", *mode], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for python, mode in ((mcp1_python, ()), (mcp2_python, ()), (mcp2_python, ("legacy",)))]
    outputs = []
    for run in runs:
        stdout, stderr = run.communicate(timeout=120)
        assert run.returncode == 0, stderr[-3000:]
        outputs.append([json.loads(line) for line in stdout.splitlines()])
    assert [lines[0]["protocol"] for lines in outputs] == ["2025-11-25", "2026-07-28", "2025-11-25"]
    episodes = [line for lines in outputs for line in lines[:3]]
    assert len({line["episode_id"] for line in episodes}) == 9
    for line in episodes:
        assert line["tools"] == ["reset", "close", "echo", "echo_message", "echo_with_length"]
        assert line["reset"]["text"].startswith(f"episode_id: {line['episode_id']}")
        message = f"client {line['who']} " + "x" * line["who"]
        for step, key in ((1, "first"), (2, "second")):   # each episode counts only its own client's steps
            assert line[key]["text"] == message and not line[key]["is_error"]
            structured = line[key]["structured"]
            assert structured["episode_id"] == line["episode_id"]
            assert structured["reward"] == pytest.approx(0.1 * len(message)) and structured["done"] is False
            assert structured["data"]["observation"]["metadata"] == {"original_message": message, "step": step}
        assert line["length"]["structured"]["data"] == {"message": "Test", "length": 4}
        assert line["closed"]["structured"]["done"] is True
    for lines in outputs:
        errors = lines[3]["errors"]
        assert errors["unknown_tool"]["code"] == -32602 and "Unknown tool: nope" in errors["unknown_tool"]["error"]
        assert errors["no_episode"]["code"] == -32602 and "call reset first" in errors["no_episode"]["error"]
        assert errors["bad_arguments"]["code"] == -32602 and "Extra inputs" in errors["bad_arguments"]["error"]
        assert errors["closed_episode"]["code"] == -32001
        assert "gone: closed by the close tool" in errors["closed_episode"]["error"]
        assert errors["after"] == "on"
    assert health(echo_server)["active_sessions"] == 0


# -- sessions: one pool ---------------------------------------------------------------------------------------------


def test_mcp_sessions_hold_slots_are_refused_at_capacity_and_reaped_when_idle() -> None:
    app = app_for(max_concurrent_envs=2, session_timeout_s=0.6, capacity_wait_s=0)
    with running_server(app) as url:
        rpc = Rpc(url)
        openenv_session = rpc.result("openenv/session/create")["session_id"]
        episode = rpc.result("tools/call", name="reset", arguments={})["structuredContent"]["episode_id"]
        assert health(url)["active_sessions"] == 2
        refused = rpc("openenv/session/create")["error"]
        assert refused["code"] == -32000 and "server at capacity: 2/2" in refused["message"]
        assert refused["data"] == {"reason": "capacity", "active_sessions": 2, "max_sessions": 2}
        assert rpc("tools/call", name="reset", arguments={})["error"]["code"] == -32000
        with connect(url.replace("http", "ws") + "/ws") as socket:   # /ws shares the pool
            assert json.loads(socket.recv())["data"]["code"] == "CAPACITY_REACHED"
        deadline = time.monotonic() + 10
        while health(url)["active_sessions"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert health(url)["active_sessions"] == 0
        gone = rpc("tools/call", session_id=openenv_session, name="echo", arguments={"message": "hi"})["error"]
        assert gone["code"] == -32001 and "idle timeout" in gone["message"]
        assert gone["data"]["close_code"] == 4408
        gone = rpc("tools/call", name="echo", arguments={"episode_id": episode, "message": "hi"})["error"]
        assert gone["code"] == -32001 and "idle timeout" in gone["message"]
        assert "session_id" in rpc.result("openenv/session/create")   # the slots came back


def test_a_closed_session_is_gone_and_a_never_opened_one_is_unknown(echo_server: str) -> None:
    rpc = Rpc(echo_server)
    session = rpc.result("openenv/session/create")["session_id"]
    assert rpc.result("openenv/session/close", session_id=session) == {"session_id": session, "closed": True}
    gone = rpc("tools/list", session_id=session)["error"]
    assert gone["code"] == -32001 and "closed by openenv/session/close" in gone["message"]
    unknown = rpc("tools/call", session_id="feed" * 8, name="echo", arguments={})["error"]
    assert unknown["code"] == -32602 and "no /mcp session or episode of that id" in unknown["message"]


def test_a_socket_attaches_to_an_mcp_session_without_a_slot_and_leaves_it_open(echo_server: str) -> None:
    rpc = Rpc(echo_server)
    session = rpc.result("openenv/session/create")["session_id"]
    ws_url = echo_server.replace("http", "ws") + f"/ws?session_id={session}"
    with connect(ws_url) as socket:
        assert socket.response.headers["x-envkit-session-id"] == session
        socket.send('{"type": "reset"}')
        assert json.loads(socket.recv())["type"] == "observation"
        assert health(echo_server)["active_sessions"] == 1
        with connect(ws_url) as second:   # one socket per session
            refusal = json.loads(second.recv())["data"]
            assert refusal["code"] == "SESSION_UNAVAILABLE" and "already has a WebSocket" in refusal["message"]
            with pytest.raises(ConnectionClosed) as closed:
                second.recv()
            assert closed.value.rcvd.code == 4404
        rpc.result("tools/call", session_id=session, name="echo", arguments={"message": "four"})
        socket.send('{"type": "state"}')
        assert json.loads(socket.recv())["data"]["step_count"] == 1
        socket.send('{"type": "close"}')
        with pytest.raises(ConnectionClosed):
            socket.recv()
    echoed = rpc.result("tools/call", session_id=session, name="echo", arguments={"message": "again"})
    assert echoed["data"]["observation"]["metadata"]["step"] == 2   # the socket left; the game goes on
    rpc.result("openenv/session/close", session_id=session)
    with connect(ws_url) as late:
        refusal = json.loads(late.recv())["data"]
        assert refusal["code"] == "SESSION_UNAVAILABLE" and "is gone" in refusal["message"]


def test_reaping_an_attached_session_closes_its_socket_with_the_idle_code() -> None:
    with running_server(app_for(max_concurrent_envs=2, session_timeout_s=0.5)) as url:
        session = Rpc(url).result("openenv/session/create")["session_id"]
        with connect(url.replace("http", "ws") + f"/ws?session_id={session}") as socket:
            with pytest.raises(ConnectionClosed) as closed:
                socket.recv(timeout=10)
        assert closed.value.rcvd.code == 4408 and health(url)["active_sessions"] == 0


def test_deleting_an_mcp_session_ends_the_episodes_it_opened(echo_server: str) -> None:
    rpc = Rpc(echo_server)
    initialized = rpc.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
    assert initialized.json()["result"]["protocolVersion"] == "2025-03-26"
    headers = {"mcp-session-id": initialized.headers["mcp-session-id"]}
    reply = rpc.post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "reset", "arguments": {"seed": 3}}}, headers=headers)
    assert reply.headers["mcp-session-id"] == headers["mcp-session-id"]
    episode = reply.json()["result"]["structuredContent"]["episode_id"]
    assert health(echo_server)["active_sessions"] == 1
    assert rpc.http.delete(rpc.url, headers=headers).status_code == 204
    assert health(echo_server)["active_sessions"] == 0
    gone = rpc("tools/call", name="echo", arguments={"episode_id": episode, "message": "hi"})["error"]
    assert "its MCP session was ended by the client" in gone["message"]
    expired = rpc.post({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, headers=headers)
    assert expired.status_code == 404 and "initialize a new one" in expired.json()["error"]["message"]


# -- bad requests ---------------------------------------------------------------------------------------------------


BAD_REQUESTS = [
    (b"{not json", -32700, "Parse error"),
    (b"{}", -32600, '"jsonrpc" must be "2.0"'),
    (b"[]", -32600, "batches are not supported"),
    (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', -32600, "batches are not supported"),
    (b'"tools/list"', -32600, "expected a JSON object"),
    (b'{"jsonrpc": "2.0", "id": 1}', -32600, '"method" must be a non-empty string'),
    (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', -32600, '"id" must be a string or an integer'),
    (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', -32600, '"id" must not be null'),
    (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": [1]}', -32602, "must be an object"),
    (b'{"jsonrpc": "2.0", "id": 7, "method": "resources/list"}', -32601, "Method not found: resources/list"),
    (b'{"jsonrpc": "2.0", "id": 7, "method": "openenv/session/frobnicate", "params": {"session_id": "x"}}', -32601,
     "Method not found"),
    (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"arguments": {}}}', -32602, 'needs "name"'),
    (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo", "arguments": [1]}}', -32602,
     "must be an object"),
    (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "nope", "arguments": {}}}', -32602,
     "Unknown tool: nope"),
    (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "close", "arguments": {}}}', -32602,
     "close needs episode_id"),
    (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo", "arguments": '
     b'{"episode_id": 5}}}', -32602, "'episode_id' must be the string id"),
]


def expected_id(body: bytes) -> Any:
    """The id an error answer carries: the request's, when it could be read and is a valid id."""
    try:
        request = json.loads(body)
    except ValueError:
        return None
    request_id = request.get("id") if isinstance(request, dict) else None
    return request_id if isinstance(request_id, (str, int)) and not isinstance(request_id, bool) else None


@pytest.mark.parametrize(("body", "code", "message"), BAD_REQUESTS)
def test_bad_json_rpc_gets_its_error_and_the_server_carries_on(echo_server: str, body: bytes, code: int,
                                                               message: str) -> None:
    rpc = Rpc(echo_server)
    episode = rpc.result("tools/call", name="reset", arguments={})["structuredContent"]["episode_id"]
    response = rpc.post(body)
    assert response.status_code == 200
    reply = response.json()
    assert reply["jsonrpc"] == "2.0" and reply["error"]["code"] == code and message in reply["error"]["message"]
    assert reply["id"] == expected_id(body)
    carried_on = rpc.result("tools/call", name="echo", arguments={"episode_id": episode, "message": "on"})
    assert carried_on["content"] == [{"type": "text", "text": "on"}]
    rpc.result("tools/call", name="close", arguments={"episode_id": episode})


def test_bad_arguments_and_a_raising_environment_say_what_was_wrong(echo_server: str) -> None:
    rpc = Rpc(echo_server)
    session = rpc.result("openenv/session/create")["session_id"]
    bad = rpc("tools/call", session_id=session, name="echo", arguments={"message": 3})["error"]
    assert bad["code"] == -32602 and "Invalid arguments for echo: message: Input should be a valid string" in \
        bad["message"]
    rpc.result("openenv/session/close", session_id=session)
    with running_server(app_for("wordle", max_concurrent_envs=2)) as url:
        wordle = Rpc(url)
        session = wordle.result("openenv/session/create")["session_id"]   # never reset: wordle needs one
        failed = wordle("tools/call", session_id=session, name="guess", arguments={"guess": "[crane]"})["error"]
        assert failed["code"] == -32603 and "tool call before reset" in failed["message"]
        episode = wordle.result("tools/call", name="reset", arguments={"seed": 1})["structuredContent"]["episode_id"]
        played = wordle.result("tools/call", name="guess", arguments={"episode_id": episode, "guess": "[crane]"})
        assert not played["isError"] and played["structuredContent"]["done"] is False
        refused = wordle.result("tools/call", name="guess", arguments={"episode_id": session, "guess": "[crane]"})
        assert refused["isError"] and "tool call before reset" in refused["content"][0]["text"]


def test_http_level_answers(echo_server: str) -> None:
    rpc = Rpc(echo_server)
    assert rpc.post(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}').status_code == 202
    assert rpc.post(b'{"jsonrpc": "2.0", "id": 3, "result": {}}').status_code == 202
    assert rpc.http.get(rpc.url).status_code == 405
    assert rpc.http.delete(rpc.url).status_code == 400
    assert rpc.http.delete(rpc.url, headers={"mcp-session-id": "nope"}).status_code == 404
    foreign = rpc.post(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}', headers={"origin": "http://evil.example"})
    assert foreign.status_code == 403
    streamed = rpc.post(b'{"jsonrpc": "2.0", "id": 9, "method": "ping"}', headers={"accept": "text/event-stream"})
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert streamed.text == 'event: message\ndata: {"jsonrpc":"2.0","id":9,"result":{}}\n\n'
    assert health(echo_server)["status"] == "healthy"


def test_a_request_over_the_message_limit_is_413() -> None:
    with running_server(app_for(max_message_bytes=4096)) as url:
        too_big = Rpc(url).post(b"{" + b" " * 8192 + b"}")
        assert too_big.status_code == 413 and "exceeds the server's limit of 4096" in too_big.json()["error"]["message"]
        # Sent in chunks with no content-length, the body is counted as it arrives.
        chunked = Rpc(url).post(iter([b"{", b" " * 3000, b" " * 3000, b"}"]))
        assert chunked.status_code == 413 and "4096" in chunked.json()["error"]["message"]
        assert health(url)["status"] == "healthy"


def test_the_reset_tool_lists_the_environments_reset_arguments(echo_server: str) -> None:
    with running_server(app_for("catch")) as url:
        tools = {tool["name"]: tool for tool in Rpc(url).result("tools/list")["tools"]}
    reset = tools["reset"]["inputSchema"]
    assert {"episode_id", "seed", "ball_column"} <= set(reset["properties"])
    assert tools["move"]["inputSchema"]["required"][0] == "episode_id"


# -- envkit validate ----------------------------------------------------------------------------------------------


def test_envkit_validate_checks_both_mcp_dialects(echo_server: str) -> None:
    import asyncio

    from envkit.publish.validate import validate_url

    report = asyncio.run(validate_url(echo_server))
    checks = {check.name: check for check in report.checks}
    assert report.ok and checks["mcp (openenv)"].status == "ok" and checks["mcp (standard)"].status == "ok"
    assert "echo({'message': 'hello'}) → 'hello'" in checks["mcp (standard)"].detail
