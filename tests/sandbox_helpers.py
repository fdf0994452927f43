"""What the sandbox tests share: the backends to run on (a backend this machine lacks skips in one line) and a count
of what sandboxes leave on the host."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from docker_engine import engine_host, skip_without_engine

from envkit.sandbox import SandboxUnavailableError
from envkit.sandbox.base import Uids
from envkit.sandbox.cgroups import PREFIX

BACKENDS = ["local", "docker"]
IMAGE = "python:3.11-slim"


def require(backend: str) -> None:
    """Skip (in one line) unless `backend` can make sandboxes here; for docker, point DOCKER_HOST at the engine."""
    try:
        if backend == "local":
            from envkit.sandbox.local import local_facilities
            local_facilities()
        else:
            skip_without_engine()
            os.environ["DOCKER_HOST"] = engine_host()
            from envkit.sandbox.docker import docker_facilities
            docker_facilities().check_image(IMAGE)
    except SandboxUnavailableError as error:
        pytest.skip(str(error))


def sandbox_processes(server_pid: int) -> list[str]:
    """Host processes of the sandboxes of the server with pid `server_pid`: those running as a uid of its block,
    and its `docker run` commands."""
    first = Uids.BASE + (server_pid % Uids.BLOCKS) * Uids.PER_SERVER
    listed = subprocess.run(["ps", "-eo", "uid=,pid=,args="], capture_output=True, text=True).stdout
    return [line for line in listed.splitlines()
            if first <= int(line.split()[0]) < first + Uids.PER_SERVER or f"--name envkit-sandbox-{server_pid}-" in line]


def leftovers(server_pid: int | None = None) -> dict[str, int]:
    """What the sandboxes of one server (default this process) hold on this machine: processes, cgroups, containers,
    and host mounts naming them. Counted per server: other servers may run sandboxes on this machine meanwhile."""
    pid = os.getpid() if server_pid is None else server_pid
    cgroups = [path for root in Path("/sys/fs/cgroup").glob("*") for path in root.rglob(f"{PREFIX}{pid}-*")]
    containers = 0
    if os.environ.get("DOCKER_HOST"):
        listed = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=envkit.sandbox={pid}"],
                                capture_output=True, text=True).stdout
        containers = len(listed.split())
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if f"{PREFIX}{pid}-" in line]
    return {"processes": len(sandbox_processes(pid)), "cgroups": len(cgroups), "containers": containers,
            "mounts": len(mounts)}


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Return once `condition()` holds; fail naming `what` was awaited if it does not within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout_s:g} s for {what}")
        time.sleep(0.05)


def back_to(before: dict[str, int], timeout_s: float = 15.0) -> bool:
    """Whether, within `timeout_s`, this process's sandboxes hold no more than `before` (a count taken while
    others were still open or being torn down, which may since have gone)."""
    deadline = time.monotonic() + timeout_s
    while any(count > before[name] for name, count in leftovers().items()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
