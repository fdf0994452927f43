"""`envkit bench` against real servers on 127.0.0.1: counting, failures by reason, JSON output, the ramp.

Runs are small and bounded; speed figures are printed by benchmarks/side_by_side.py, never asserted.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import subprocess
import sys
import threading
from typing import Any, Iterator

import pytest

from envkit import Action, Environment, Observation, State, create_app
from envkit.bench import available_clients, run_churn, run_load, run_ramp, run_sync
from envkit.bench.raw_client import RawWebSocket, client_frame, endpoint
from envkit.bench.script import ActionTemplate, SessionScript, Tally
from envkit.testing import running_server


class Said(Action):
    message: str = ""
    fail: bool = False
    sleep_s: float = 0.0


class Heard(Observation):
    echoed_message: str = ""


class LaggingEcho(Environment[Said, Heard, State]):
    """Answers each step with the message of the step before it (any session's): every reply is stale."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUN_INLINE = True
    previous = ""

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Heard:
        return Heard()

    def step(self, action: Said) -> Heard:
        heard, LaggingEcho.previous = LaggingEcho.previous, action.message
        return Heard(echoed_message=heard)

    @property
    def state(self) -> State:
        return State()


class Echo(LaggingEcho):
    """Echoes faithfully; fails or sleeps when the action asks."""

    async def step_async(self, action: Said) -> Heard:
        if action.fail:
            raise RuntimeError("asked to fail")
        await asyncio.sleep(action.sleep_s)
        return Heard(echoed_message=action.message)


class Journal(Echo):
    """Echoes, and writes every reset, step and close of every session into one shared list."""

    events: list[str] = []

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Heard:
        Journal.events.append("reset")
        return Heard()

    async def step_async(self, action: Said) -> Heard:
        Journal.events.append("step")
        return Heard(echoed_message=action.message)

    def close(self) -> None:
        Journal.events.append("close")


def serve(env: type[Environment], max_sessions: int = 64) -> Any:
    return running_server(create_app(env, Said, Heard, max_concurrent_envs=max_sessions))


@pytest.fixture(scope="module")
def echo() -> Iterator[str]:
    with serve(Echo, max_sessions=256) as url:
        yield url


@pytest.mark.parametrize("client", available_clients())
def test_load_counts_steps_and_checks_every_reply(echo: str, client: str) -> None:
    result = run_sync(run_load(echo, 8, 5, client=client))
    assert result.client == client
    assert (result.sessions_ok, result.steps, result.mismatches, result.failures) == (8, 40, 0, {})
    assert result.success_rate == 1.0
    assert set(result.step_latency_ms) == {"p50", "p90", "p99", "max"}
    assert result.step_latency_ms["p50"] <= result.step_latency_ms["max"]


@pytest.mark.parametrize("client", available_clients())
def test_steps_are_timed_between_all_sessions_open_and_any_closing(client: str) -> None:
    """Every session resets before any steps, and none closes before every session had its last step reply."""
    Journal.events = []
    seen: dict[str, list[str]] = {}

    async def opened() -> None:
        seen["open"] = list(Journal.events)

    async def stepped() -> None:
        seen["stepped"] = list(Journal.events)

    with serve(Journal) as url:
        result = run_sync(run_load(url, 12, 6, client=client, on_open=opened, on_stepped=stepped))
    assert (result.sessions_ok, result.steps, result.failures) == (12, 72, {})
    assert seen["open"] == ["reset"] * 12
    assert seen["stepped"] == ["reset"] * 12 + ["step"] * 72
    assert 0 < result.step_seconds <= result.wall_s
    assert 0 < result.open_seconds <= result.wall_s


@pytest.mark.parametrize("client", available_clients())
def test_stale_replies_are_counted_as_mismatches(client: str) -> None:
    with serve(LaggingEcho) as url:
        result = run_sync(run_load(url, 1, 6, client=client))
    assert result.mismatches == 6
    assert result.sessions_ok == 0
    assert result.failures == {"mismatch": 1}


def test_without_a_token_in_the_action_correctness_is_not_checked(echo: str) -> None:
    result = run_sync(run_load(echo, 2, 3, action={"message": "same for everyone"}))
    assert result.mismatches is None
    assert result.sessions_ok == 2
    assert "not checked" in result.text()


@pytest.mark.parametrize("client", available_clients())
def test_failures_are_counted_by_reason(echo: str, client: str) -> None:
    failing = run_sync(run_load(echo, 3, 2, action={"message": "{token}", "fail": True}, client=client))
    assert failing.failures == {"error frame: EXECUTION_ERROR": 3}
    invalid = run_sync(run_load(echo, 2, 2, action={"nonsense": "{token}"}, client=client))
    assert invalid.failures == {"error frame: VALIDATION_ERROR": 2}
    with serve(Echo, max_sessions=2) as url:
        crowded = run_sync(run_load(url, 5, 2, client=client))
    assert crowded.sessions_ok == 2
    assert crowded.failures == {"error frame: CAPACITY_REACHED": 3}


@pytest.mark.parametrize("client", available_clients())
def test_nothing_listening_is_a_connect_failure(client: str) -> None:
    with serve(Echo) as url:
        pass  # the port is free again once the server stopped
    result = run_sync(run_load(url, 2, 1, client=client))
    assert result.failures == {"connect: connection refused": 2}


def test_a_run_past_its_timeout_stops_and_counts_the_rest(echo: str) -> None:
    result = run_sync(run_load(echo, 2, 1, action={"message": "{token}", "sleep_s": 2}, timeout_s=0.5))
    assert result.failures == {"timed out: still running after 0.5 s": 2}


def test_ramp_stops_by_itself_at_the_first_level_below_95_percent() -> None:
    with serve(Echo, max_sessions=40) as url:
        result = run_sync(run_ramp(url, start=10, max_sessions=1000, steps=1, budget_s=60))
    assert [level["sessions"] for level in result.levels] == [10, 20, 40, 80]
    assert result.max_sessions_held == 40
    assert "80 sessions: 50.0% succeeded, below 95%" in result.stopped_because
    assert "the server's own limit of 40 sessions" in result.stopped_because   # refused with CAPACITY_REACHED
    assert "--max-concurrent-envs" in result.stopped_because


def test_ramp_stops_at_its_maximum(echo: str) -> None:
    result = run_sync(run_ramp(echo, start=4, max_sessions=6, steps=1))
    assert [level["sessions"] for level in result.levels] == [4, 6]
    assert result.max_sessions_held == 6
    assert result.stopped_because == "reached the ramp maximum of 6 sessions"


@pytest.mark.parametrize("client", ["auto", *available_clients()])
def test_churn_opens_and_closes_sessions(echo: str, client: str) -> None:
    result = run_sync(run_churn(echo, 0.3, workers=2, client=client))
    assert result.client == ("raw" if client == "auto" else client)
    assert result.sessions > 0
    assert result.failures == {}
    assert result.sessions_per_s > 0


def test_raw_client_answers_the_server_keepalive() -> None:
    """Sessions held quiet for several ping rounds survive only if the client answers each ping."""
    app = create_app(Echo, Said, Heard, max_concurrent_envs=8, ping_interval_s=0.2, ping_timeout_s=0.3)

    async def hold() -> None:
        await asyncio.sleep(1.5)

    with running_server(app) as url:
        result = run_sync(run_load(url, 3, 2, client="raw", on_open=hold))
    assert (result.sessions_ok, result.steps, result.failures) == (3, 6, {})


def test_raw_client_reports_a_refused_handshake() -> None:
    with running_server(create_app(Echo, Said, Heard)) as url:
        result = run_sync(run_load(url.replace("http://", "ws://") + "/nowhere", 2, 1, client="raw"))
    assert result.sessions_ok == 0
    [(reason, count)] = result.failures.items()
    assert count == 2 and reason.startswith("connect: server answered 40"), reason


def test_raw_client_says_it_speaks_plain_ws_only() -> None:
    result = run_sync(run_load("wss://127.0.0.1:9/ws", 2, 1, client="raw"))
    [(reason, count)] = result.failures.items()
    assert count == 2 and "plain ws:// only" in reason and "--client picows" in reason, reason


def test_raw_client_frames_are_masked_and_sized_for_every_length_class() -> None:
    for length in (0, 5, 125, 126, 65535, 65536):
        payload = bytes(range(256)) * (length // 256) + bytes(range(length % 256))
        frame = client_frame(0x1, payload)
        assert frame[0] == 0x81 and frame[1] & 0x80, "final text frame, masked"
        size, offset = frame[1] & 0x7F, 2
        if size == 126:
            size, offset = int.from_bytes(frame[2:4], "big"), 4
        elif size == 127:
            size, offset = int.from_bytes(frame[2:10], "big"), 10
        mask, body = frame[offset:offset + 4], frame[offset + 4:]
        assert size == len(body) == length
        assert bytes(byte ^ mask[index % 4] for index, byte in enumerate(body)) == payload


def test_raw_client_reads_split_fragmented_and_control_frames() -> None:
    """Server bytes cut at every boundary: a fragmented message, a ping between its parts, a 126-length message
    and a close frame, each read whole; the ping is answered with a pong."""

    class Recorder(RawWebSocket):
        def __init__(self) -> None:
            super().__init__(endpoint("ws://127.0.0.1:9/ws"))
            self.messages: list[bytes] = []
            self.closes: list[tuple[int | None, str]] = []

        def on_message(self, payload: bytes) -> None:
            self.messages.append(payload)

        def on_close(self, code: int | None, reason: str) -> None:
            self.closes.append((code, reason))

    class Transport:
        def __init__(self) -> None:
            self.written: list[bytes] = []
            self.closing = False

        def write(self, data: bytes) -> None:
            self.written.append(data)

        def is_closing(self) -> bool:
            return self.closing

        def close(self) -> None:
            self.closing = True

    long_message = b"x" * 300
    server_bytes = (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"
                    + bytes([0x01, 3]) + b"abc" + bytes([0x89, 2]) + b"hi" + bytes([0x80, 3]) + b"def"
                    + bytes([0x81, 126]) + (300).to_bytes(2, "big") + long_message
                    + bytes([0x88, 6]) + (4408).to_bytes(2, "big") + b"idle")

    async def feed(chunk: int) -> tuple[Recorder, Transport]:
        recorder, transport = Recorder(), Transport()
        recorder.connection_made(transport)  # type: ignore[arg-type]
        for start in range(0, len(server_bytes), chunk):
            recorder.data_received(server_bytes[start:start + chunk])
        return recorder, transport

    for chunk in (1, 2, 7, len(server_bytes)):
        recorder, transport = asyncio.run(feed(chunk))
        assert recorder.messages == [b"abcdef", long_message]
        assert recorder.closes == [(4408, "idle")]
        assert transport.closing
        opcodes = [frame[0] & 0x0F for frame in transport.written[1:]]
        assert opcodes == [0xA, 0x8], "a pong for the ping, then the close echoed"


def test_step_tokens_are_unique_per_session_and_step() -> None:
    tally, template = Tally(), ActionTemplate({"message": "{token}", "note": "x{token}y"})
    first, second = SessionScript(tally, template, "run", 1, 2), SessionScript(tally, template, "run", 2, 2)
    frames = {first.step_frame(), second.step_frame()}
    first.remaining -= 1
    frames.add(first.step_frame())
    assert len(frames) == 3
    assert json.loads(first.step_frame())["data"]["note"] == "x" + first.token.decode() + "y"


def bench_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envkit.cli", "bench", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_json_output_shape(echo: str) -> None:
    done = bench_cli("--url", echo, "--sessions", "3", "--steps", "4", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["mode"] == "load"
    assert {"url", "client", "sessions", "steps_per_session", "sessions_ok", "steps", "steps_per_s",
            "step_latency_ms", "connect_reset_ms", "failures", "mismatches", "loadgen_cpu", "success_rate", "step_seconds",
            "open_seconds", "wall_s"} <= set(result)
    assert (result["sessions_ok"], result["steps"], result["mismatches"]) == (3, 12, 0)
    assert result["url"] == echo.replace("http://", "ws://") + "/ws"

    ramp = json.loads(bench_cli("--url", echo, "--ramp", "--ramp-start", "2", "--ramp-max", "4", "--steps", "1",
                                "--json").stdout)
    assert (ramp["mode"], ramp["max_sessions_held"], len(ramp["levels"])) == ("ramp", 4, 2)
    churn = json.loads(bench_cli("--url", echo, "--churn", "0.2", "--sessions", "2", "--json").stdout)
    assert churn["mode"] == "churn" and churn["sessions"] > 0


def test_cli_text_output(echo: str) -> None:
    done = bench_cli("--url", echo, "--sessions", "2", "--steps", "2")
    assert done.returncode == 0, done.stderr
    assert "sessions ok       2/2" in done.stdout
    assert "after all sessions opened in" in done.stdout
    assert "0 mismatched replies" in done.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--action", "{not json"], "--action"),
    (["--action", "[1, 2]"], "must be a JSON object"),
    (["--ramp", "--churn", "1"], "--ramp and --churn"),
    (["--ramp", "--ramp-start", "100", "--ramp-max", "10"], "--ramp-start 100 is above --ramp-max 10"),
    (["--sessions", "0"], "--sessions"),
])
def test_cli_rejects_bad_input(args: list[str], message: str) -> None:
    done = bench_cli("--url", "ws://127.0.0.1:9", *args)
    assert done.returncode == 2
    assert message in done.stderr


def test_cli_says_when_nothing_answers() -> None:
    with serve(Echo) as url:
        pass
    done = bench_cli("--url", url, "--sessions", "2", "--steps", "1")
    assert done.returncode == 1
    assert "no session succeeded" in done.stderr and "connection refused (2)" in done.stderr


def test_cli_against_a_web_server_that_is_no_environment_says_so_without_a_traceback() -> None:
    """A page server answering `/metadata` with HTML (not JSON) is reported in one line by `bench` and `eval`; a
    bench over MCP, which it refuses, asks whether it serves that surface."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html><body>a web page</body></html>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page) as page:
        threading.Thread(target=page.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{page.server_port}"
        try:
            done = bench_cli("--url", url, "--sessions", "2", "--steps", "1")
            over_mcp = bench_cli("--url", url, "--protocol", "mcp", "--sessions", "1", "--steps", "1")
            evaluated = subprocess.run([sys.executable, "-m", "envkit.cli", "eval", "--env-url", url, "--policy",
                                        "random", "--games", "1"], capture_output=True, text=True, timeout=120)
        finally:
            page.shutdown()
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "no session succeeded" in done.stderr
    assert over_mcp.returncode == 1 and "Traceback" not in over_mcp.stderr
    assert "HTTP 501" in over_mcp.stderr and "does it serve that surface?" in over_mcp.stderr
    assert evaluated.returncode == 1 and "Traceback" not in evaluated.stderr
    assert "not a JSON object, so this is not an envkit or OpenEnv server" in evaluated.stderr


def test_cli_against_a_non_echo_env_names_the_default_action_and_suggests_one() -> None:
    from envkit.app.targets import app_from_environment, resolve_target

    with running_server(app_from_environment(resolve_target("catch").env_class, max_concurrent_envs=8)) as url:
        done = bench_cli("--url", url, "--sessions", "2", "--steps", "1")
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert "error frame: VALIDATION_ERROR (2)" in done.stderr
        assert 'refused the default step action {"message": "{token}"}' in done.stderr
        assert "--action '{\"action_id\": 0}'" in done.stderr and f"{url}/schema" in done.stderr
        assert "is an environment server running there" not in done.stderr
        suggested = bench_cli("--url", url, "--sessions", "2", "--steps", "1", "--action", '{"action_id": 0}')
        assert suggested.returncode == 0, suggested.stderr


def test_replies_are_judged_by_their_type_whatever_the_key_order() -> None:
    tally = Tally()
    script = SessionScript(tally, ActionTemplate(), "run", 1, 2)
    assert script.on_reply(b'{"data": {"observation": {}}, "type": "observation"}') is None and script.ready
    frame = script.step_frame()
    token = json.loads(frame)["data"]["message"]
    reply = json.dumps({"data": {"observation": {"echoed_message": token}}, "type": "observation"}).encode()
    assert script.on_reply(reply) is not None
    assert script.on_reply(b'{"type": "error", "data": "not an object"}') is None
    assert (tally.steps, tally.mismatches, dict(tally.failures)) == (1, 0, {"error frame: no code": 1})
    other = SessionScript(tally, ActionTemplate(), "run", 2, 1)
    other.on_reply(b"not json")
    assert tally.failures["reply is not a protocol frame"] == 1
