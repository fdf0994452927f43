"""A sandbox lives and dies with its session: nothing is left after a close, an idle reap, a shutdown, a churn of
sessions, or a server killed with SIGKILL (processes, cgroups, containers and mounts counted on the host)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from conftest import subprocess_env
from sandbox_env import SandboxEnvironment, ShellAction, ShellObservation
from sandbox_helpers import BACKENDS, leftovers, require, wait_until

from envkit import EnvClient, SessionLostError
from envkit.app import create_app
from envkit.sandbox import close_pools, open_sandbox
from envkit.testing import ServedProcess, running_server


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    require(request.param)
    monkeypatch.setenv("ENVKIT_SANDBOX", request.param)
    monkeypatch.setenv("ENVKIT_SANDBOX_WARM", "0")    # a warm pool would hold sandboxes beyond any session
    close_pools()
    yield request.param
    close_pools()


NOTHING = {"processes": 0, "cgroups": 0, "containers": 0, "mounts": 0}


def settled(server_pid: int | None = None, timeout_s: float = 15.0) -> dict[str, int]:
    """What a server's sandboxes hold once the host has had up to `timeout_s` to tear them down."""
    deadline = time.monotonic() + timeout_s
    while (now := leftovers(server_pid)) != NOTHING and time.monotonic() < deadline:
        time.sleep(0.2)
    return now


def busy(env: object) -> None:
    """Open the session's sandbox and leave a background process and a file in it."""
    result = json.loads(env.call("run", command="sleep 600 & echo x > kept.txt; echo started").text)
    assert result["stdout"] == "started\n"


def test_close_idle_reap_and_shutdown_end_the_sandbox(backend: str) -> None:
    app = create_app(SandboxEnvironment, ShellAction, ShellObservation, max_concurrent_envs=4, session_timeout_s=5.0)
    with running_server(app) as url:
        with EnvClient(url).sync() as env:
            busy(env)
            assert leftovers()["processes"] > 0
        assert settled() == NOTHING, "after close"

        with EnvClient(url).sync() as env:
            busy(env)
            wait_until(lambda: leftovers()["processes"] == 0, "the idle session to be reaped (its timeout is 5 s)")
            with pytest.raises(SessionLostError):
                env.call("run", command="true")
            assert settled() == NOTHING, "after idle reap"

        for _ in range(2):
            busy(EnvClient(url).sync().connect())
    assert settled() == NOTHING, "after shutdown"


def test_churned_sandboxes_leave_nothing(backend: str) -> None:
    for _ in range(30):
        with open_sandbox() as box:
            box.run("sleep 600 & true")
    assert settled() == NOTHING


def test_warm_pool_ends_with_close_pools(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVKIT_SANDBOX_WARM", "2")
    open_sandbox().close()
    wait_until(lambda: leftovers()["processes"] > 0, "the warm pool to start a sandbox")
    close_pools()
    assert settled() == NOTHING


def test_server_killed_with_sigkill_leaves_nothing(backend: str) -> None:
    env_vars = subprocess_env(ENVKIT_SANDBOX=backend, ENVKIT_SANDBOX_WARM="2")
    with ServedProcess("sandbox_env:SandboxEnvironment", "--max-concurrent-envs", "4", env=env_vars) as served:
        clients = [EnvClient(served.url).sync().connect() for _ in range(2)]
        for env in clients:
            busy(env)
        assert served.process is not None
        server = served.process.pid
        assert leftovers(server)["processes"] > 0
        served.kill()
    left = settled(server)
    assert {**left, "cgroups": 0} == NOTHING
    # A killed server cannot remove its cgroup folders; the next process that opens a sandbox does.
    subprocess.run([sys.executable, "-c", "from envkit.sandbox import open_sandbox; open_sandbox().close()"],
                   env=env_vars, check=True, timeout=120)
    assert settled(server) == NOTHING


def test_an_ors_session_ends_its_sandbox_when_deleted(backend: str) -> None:
    """The Open Reward Standard surface opens sessions from the same pool: deleting one closes its sandbox."""
    from test_ors import call, open_session

    app = create_app(SandboxEnvironment, ShellAction, ShellObservation, max_concurrent_envs=4)
    with running_server(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        sid = open_session(http, split="train", index=0)
        output = call(http, sid, "run", input={"command": "sleep 600 & echo started"})["output"]
        assert json.loads(output["blocks"][0]["text"])["stdout"] == "started\n"
        assert leftovers()["processes"] > 0
        http.post("/delete_session", headers={"X-Session-ID": sid})
        assert settled() == NOTHING
