"""`envkit bench --protocol mcp|ors`: the same sessions, tokens and checks over MCP `tools/call` and ORS `/call`.

Real envkit servers on 127.0.0.1 (uvicorn, which serves both surfaces); runs are small and bounded.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any, Iterator

import pytest

from envkit import Action, Environment, Observation, State, create_app, tool
from envkit.bench import run_load, run_sync
from envkit.testing import running_server

PROTOCOLS = ("mcp", "ors")


class Said(Action):
    message: str = ""


class Heard(Observation):
    echoed_message: str = ""


class Parrot(Environment[Said, Heard, State]):
    """Repeats what it is told through its `say` tool; `lagging` makes it repeat the previous message instead."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUN_INLINE = True
    lagging = False
    previous = ""

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Heard:
        return Heard()

    def step(self, action: Said) -> Heard:
        heard = Parrot.previous if self.lagging else action.message
        Parrot.previous = action.message
        return Heard(echoed_message=heard)

    @property
    def state(self) -> State:
        return State()

    @tool
    def say(self, message: str, fail: bool = False) -> Heard:
        """Say something; it is repeated back.

        Args:
            message: What to say.
            fail: Raise instead of answering.
        """
        if fail:
            raise RuntimeError("asked to fail")
        return self.step(Said(message=message))


class LaggingParrot(Parrot):
    lagging = True


def serve(env: type[Environment], max_sessions: int = 64) -> Any:
    return running_server(create_app(env, Said, Heard, max_concurrent_envs=max_sessions))


@pytest.fixture(scope="module")
def parrot() -> Iterator[str]:
    with serve(Parrot) as url:
        yield url


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_call_carries_its_token_back(parrot: str, protocol: str) -> None:
    result = run_sync(run_load(parrot, 6, 5, protocol=protocol, tool="say"))
    assert result.client == protocol
    assert (result.sessions_ok, result.steps, result.mismatches, result.failures) == (6, 30, 0, {})
    assert result.step_latency_ms["p50"] <= result.step_latency_ms["max"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_sessions_end_when_the_run_does(parrot: str, protocol: str) -> None:
    """MCP episodes are closed and ORS sessions deleted: the slots are free again."""
    with serve(Parrot, max_sessions=3) as url:
        for _ in range(3):
            result = run_sync(run_load(url, 3, 2, protocol=protocol, tool="say"))
            assert (result.sessions_ok, result.failures) == (3, {})


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_stale_replies_are_mismatches(protocol: str) -> None:
    with serve(LaggingParrot) as url:
        result = run_sync(run_load(url, 1, 4, protocol=protocol, tool="say"))
    assert (result.mismatches, result.sessions_ok, result.failures) == (4, 0, {"mismatch": 1})


@pytest.mark.parametrize(("protocol", "unknown_tool", "tool_raised", "full"), [
    ("mcp", "HTTP 200: JSON-RPC error -32602", "HTTP 200: tool error", "open: reset: HTTP 200: JSON-RPC error -32000"),
    ("ors", "HTTP 200: not_found", "HTTP 200: execution_error", "open: create: HTTP 503: capacity"),
])
def test_failures_are_counted_by_reason(parrot: str, protocol: str, unknown_tool: str, tool_raised: str,
                                        full: str) -> None:
    assert run_sync(run_load(parrot, 2, 2, protocol=protocol, tool="shout")).failures == {unknown_tool: 2}
    failing = run_sync(run_load(parrot, 2, 2, protocol=protocol, tool="say",
                                action={"message": "{token}", "fail": True}))
    assert failing.failures == {tool_raised: 2}
    with serve(Parrot, max_sessions=2) as url:
        crowded = run_sync(run_load(url, 4, 2, protocol=protocol, tool="say"))
    assert (crowded.sessions_ok, crowded.failures) == (2, {full: 2})


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_nothing_listening_is_a_connect_failure(protocol: str) -> None:
    with serve(Parrot) as url:
        pass  # the port is free again once the server stopped
    result = run_sync(run_load(url, 2, 1, protocol=protocol, tool="say"))
    assert result.failures == {"connect: connection refused": 2}


def test_cli_runs_over_mcp_and_refuses_ramp_or_churn_there(parrot: str) -> None:
    def bench(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "envkit.cli", "bench", "--url", parrot, *args],
                              capture_output=True, text=True, timeout=120)

    done = bench("--protocol", "mcp", "--tool", "say", "--sessions", "2", "--steps", "3")
    assert done.returncode == 0, done.stderr
    assert "sessions ok       2/2" in done.stdout and "0 mismatched replies" in done.stdout
    refused = bench("--protocol", "ors", "--churn", "1")
    assert refused.returncode == 2 and "--protocol ors measures steps only" in refused.stderr
