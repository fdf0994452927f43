"""Wire compatibility with OpenEnv 0.10.0, using its real client and server from PyPI.

OpenEnv's pins clash with ours, so it lives in its own virtual environment: `$ENVKIT_OPENENV_PYTHON`
if set, else `benchmarks/.venv-openenv` (the one the benchmarks use), created on first use
(pip install openenv==0.10.0; the `openenv_python` fixture in conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from envkit import CapacityError, EnvClient, EnvError
from envkit.testing import ServedProcess, free_port

PEER = Path(__file__).resolve().parent / "openenv_peer"
REPO = Path(__file__).resolve().parents[1]
OPENENV_ECHO = REPO / "benchmarks" / "servers" / "openenv_echo.py"


def run_peer(python: str, script: str, *args: str) -> list[dict]:
    done = subprocess.run([python, str(PEER / script), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_openenv_client_plays_against_envkit_serve_echo(openenv_python: str) -> None:
    with ServedProcess("echo") as served:
        lines = run_peer(openenv_python, "generic_client_episode.py", served.url)
    reset, hello, envkit_step, state, error, after = lines
    assert reset["observation"]["echoed_message"] == "Echo environment ready!" and reset["reward"] == 0.0
    assert hello == {"observation": {"echoed_message": "hello", "message_length": 5,
                                     "metadata": {"original_message": "hello", "step": 1}},
                     "reward": pytest.approx(0.5), "done": False}
    assert envkit_step["observation"]["message_length"] == 6
    assert state["state"]["step_count"] == 2
    assert "VALIDATION_ERROR" in error["error"]
    assert after["after_error"]["echoed_message"] == "still here"


@pytest.fixture
def openenv_server(openenv_python: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """The benchmarks' OpenEnv echo server (OpenEnv's own create_app), on a free 127.0.0.1 port."""
    limit = getattr(request, "param", 8)
    port = free_port()
    process = subprocess.Popen([openenv_python, str(OPENENV_ECHO), "--port", str(port),
                                "--max-concurrent-envs", str(limit)])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _healthy(url):
            assert process.poll() is None and time.monotonic() < deadline, "the OpenEnv server did not start"
            time.sleep(0.1)
        yield url
    finally:
        process.kill()
        process.wait(10)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


async def test_envkit_client_plays_against_an_openenv_server(openenv_server: str) -> None:
    async with EnvClient(openenv_server) as env:
        assert env.session_id is None   # OpenEnv sends no session header
        result = await env.reset()
        assert result.observation["echoed_message"] == "Echo environment ready!"
        result = await env.step({"message": "hello"})
        assert (result.observation["message_length"], result.reward, result.done) == (5, pytest.approx(0.5), False)
        assert (await env.state())["step_count"] == 1
        with pytest.raises(EnvError) as error:
            await env.step({"nonsense": True})
        assert error.value.code == "VALIDATION_ERROR"
        assert (await env.step({"message": "again"})).observation["echoed_message"] == "again"


@pytest.mark.parametrize("openenv_server", [1], indirect=True)
async def test_envkit_client_maps_openenv_capacity_refusal(openenv_server: str) -> None:
    async with EnvClient(openenv_server) as first:
        await first.reset()
        second = EnvClient(openenv_server)
        with pytest.raises(CapacityError):
            await second.reset()   # OpenEnv refuses on the first call, not at connect
        await second.close()
