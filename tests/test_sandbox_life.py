"""A sandbox lives and dies with its session: nothing is left after a close, an idle reap, a shutdown, a churn of
sessions, or a server killed with SIGKILL (processes, cgroups, containers and mounts counted on the host)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from conftest import subprocess_env
from sandbox_env import SandboxEnvironment, ShellAction, ShellObservation
from sandbox_helpers import BACKENDS, leftovers, require, wait_until

from envkit import EnvClient, SessionLostError
from envkit.app import create_app
from envkit.sandbox import SandboxLimits, close_pools, open_sandbox
from envkit.testing import ServedProcess, running_server


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    require(request.param)
    monkeypatch.setenv("ENVKIT_SANDBOX", request.param)
    monkeypatch.setenv("ENVKIT_SANDBOX_WARM", "0")    # a warm pool would hold sandboxes beyond any session
    close_pools()
    yield request.param
    close_pools()


NOTHING = {"processes": 0, "cgroups": 0, "containers": 0, "mounts": 0, "folders": 0}


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


def running(command: str) -> bool:
    """Whether a process with exactly this command line runs on this machine (a sandbox's, seen from the host)."""
    return command in subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout.splitlines()


def test_server_killed_with_sigkill_leaves_nothing(backend: str) -> None:
    """Killed while one session's command still runs, and another's left a process behind: the running command ends
    at once (not at its wall time), and the next server removes what the kernel does not."""
    env_vars = subprocess_env(ENVKIT_SANDBOX=backend, ENVKIT_SANDBOX_WARM="2")
    long_command = "sleep 3141"
    with ServedProcess("sandbox_env:SandboxEnvironment", "--max-concurrent-envs", "4", env=env_vars) as served:
        clients = [EnvClient(served.url).sync().connect() for _ in range(3)]
        for env in clients[:2]:
            busy(env)
        waiting = threading.Thread(target=lambda: _quietly(clients[2].call, "run", command=long_command,
                                                           timeout_s=3600.0), daemon=True)
        waiting.start()
        wait_until(lambda: running(long_command), "the long command to start")
        assert served.process is not None
        server = served.process.pid
        assert leftovers(server)["processes"] > 0
        served.kill()
    wait_until(lambda: not running(long_command), "the killed server's running command to end")
    left = settled(server)
    assert {**left, "cgroups": 0, "folders": 0} == NOTHING
    # A killed server cannot remove its cgroup folders; the next process that opens a sandbox does.
    subprocess.run([sys.executable, "-c", "from envkit.sandbox import open_sandbox; open_sandbox().close()"],
                   env=env_vars, check=True, timeout=120)
    assert settled(server) == NOTHING


def _quietly(call: Callable[..., object], *args: object, **kwargs: object) -> None:
    """Make a call whose server is killed while it waits."""
    try:
        call(*args, **kwargs)
    except Exception:
        pass


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


def test_only_cgroups_of_owners_provably_gone_are_removed() -> None:
    """A dead server's pid may name a live process by then (pids are reused), and a server in another pid namespace
    is out of sight: only an owner whose pid now runs with another start time, in this namespace, is gone."""
    require("local")
    from envkit.sandbox.cgroups import PREFIX, Cgroups
    from envkit.sandbox.local import local_facilities
    from envkit.owner import current_owner

    found = local_facilities().cgroups
    if found is None or found.pids is None:
        pytest.skip("no writable pids controller here")
    boot, namespace, pid, started = current_owner().split(".")
    owners = {"reused pid": f"{boot}.{namespace}.{os.getppid()}.1", "live": current_owner(),
              "other namespace": f"{boot}.1.{pid}.1", "other boot": f"000000000000.{namespace}.{pid}.1"}
    folders = {name: found.pids / f"{PREFIX}{owner}-probe" for name, owner in owners.items()}
    for folder in folders.values():
        folder.mkdir()
    try:
        Cgroups()          # what the next server does when it first opens a sandbox
        assert {name: folder.exists() for name, folder in folders.items()} == {
            "reused pid": False, "live": True, "other namespace": True, "other boot": True}
    finally:
        for folder in folders.values():
            if folder.exists():
                folder.rmdir()


def test_servers_sharing_an_engine_keep_their_containers() -> None:
    """Containers labelled by a server in another pid namespace (one in a container using the engine's socket), on
    another host (another boot), or by a live server here stay when a server starts; only one whose owner's pid now
    runs with another start time (a dead server's pid, reused) goes. The pid-only clean-up removed every container
    whose pid was not alive in its own namespace."""
    require("docker")
    from envkit.sandbox.docker import LABEL, docker_facilities
    from envkit.owner import current_owner

    boot, namespace, pid, started = current_owner().split(".")
    gone = subprocess.Popen(["true"])
    gone.wait()
    owners = {"another namespace": f"{boot}.1.{gone.pid}.{started}", "another host": f"000000000000.{namespace}.1.1",
              "live": current_owner(), "reused pid": f"{boot}.{namespace}.{os.getppid()}.1"}
    made = {name: subprocess.run(["docker", "create", "--label", f"{LABEL}={owner}", "python:3.11-slim", "true"],
                                 capture_output=True, text=True, check=True).stdout.strip()
            for name, owner in owners.items()}
    try:
        docker_facilities()._remove_orphans()       # what a server starting on this engine does
        left = set(subprocess.run(["docker", "ps", "-aq", "--no-trunc"], capture_output=True, text=True).stdout.split())
        assert {name: container in left for name, container in made.items()} == {
            "another namespace": True, "another host": True, "live": True, "reused pid": False}
    finally:
        subprocess.run(["docker", "rm", "-f", *made.values()], capture_output=True)


def test_all_pools_together_keep_at_most_the_warm_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """One pool per kind of sandbox (a Harbor folder: one per task image), each wanting 2 waiting: together they keep
    `ENVKIT_SANDBOX_WARM_MAX` waiting, not one pool's worth each."""
    require("local")
    from envkit.sandbox.pool import WARM_SLOTS, pool_for

    monkeypatch.setenv("ENVKIT_SANDBOX_WARM", "2")
    monkeypatch.setenv("ENVKIT_SANDBOX_WARM_MAX", "3")
    close_pools()
    kinds = [SandboxLimits(wall_s=10 + n) for n in range(5)]
    try:
        for limits in kinds:
            open_sandbox("local", limits=limits).close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (WARM_SLOTS.held < 3 or any(
                pool_for(("local", limits), lambda: None)._filling is not None for limits in kinds)):
            time.sleep(0.05)
        waiting = [pool_for(("local", limits), lambda: None).waiting for limits in kinds]
        assert sum(waiting) == WARM_SLOTS.held == 3, waiting
    finally:
        close_pools()
    assert WARM_SLOTS.held == 0
