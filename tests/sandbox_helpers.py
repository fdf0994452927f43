"""What the sandbox tests share: the backends to run on (a backend this machine lacks skips in one line) and a count
of what sandboxes leave on the host."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from docker_engine import engine_host, skip_without_engine

from envkit.sandbox import SandboxUnavailableError
from envkit.sandbox.base import Uids
from envkit.sandbox.cgroups import PREFIX

BACKENDS = ["local", "docker", "landlock"]
#: Backends a loop-owning agent runs on: `run_agent` installs its relay in /tmp and reaches the channel at
#: /run/envkit, which a landlock sandbox has elsewhere (`Sandbox.channel`, `TMPDIR`).
AGENT_BACKENDS = ["local", "docker"]
IMAGE = "python:3.11-slim"


def require(backend: str) -> None:
    """Skip (in one line) unless `backend` can make sandboxes here; for docker, point DOCKER_HOST at the engine."""
    try:
        if backend == "local":
            from envkit.sandbox.local import local_facilities
            local_facilities()
        elif backend == "landlock":
            from envkit.sandbox.landlock import landlock_facilities
            landlock_facilities()
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
    claimed = [int(path.stem) for path in Uids.FOLDER.glob("*.lock") if path.read_text() == str(server_pid)]
    first = Uids.BASE + claimed[0] * Uids.PER_SERVER if claimed else -Uids.PER_SERVER
    listed = subprocess.run(["ps", "-eo", "uid=,pid=,args="], capture_output=True, text=True).stdout
    return [line for line in listed.splitlines()
            if first <= int(line.split()[0]) < first + Uids.PER_SERVER
            or re.search(rf"--name envkit-sandbox-\w+\.\d+\.{server_pid}\.\d+-", line)]


def leftovers(server_pid: int | None = None) -> dict[str, int]:
    """What the sandboxes of one server (default this process) hold on this machine: processes, cgroups, containers,
    host mounts naming them, and the landlock backend's folders. Counted per server: other servers may run sandboxes
    on this machine meanwhile."""
    pid = os.getpid() if server_pid is None else server_pid
    cgroups = _cgroups(f"{PREFIX}*.*.{pid}.*-*")
    containers = 0
    if os.environ.get("DOCKER_HOST"):
        containers = len(owned_containers(pid))
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if re.search(rf"{PREFIX}\w+\.\d+\.{pid}\.\d+-", line)]
    landlock = Path(tempfile.gettempdir(), "envkit-landlock")
    folders = [path for path in landlock.glob(f"*.*.{pid}.*/*")] if landlock.is_dir() else []
    return {"processes": len(sandbox_processes(pid)), "cgroups": len(cgroups), "containers": containers,
            "mounts": len(mounts), "folders": len(folders)}


def owned_containers(server_pid: int, *filters: str) -> list[str]:
    """The ids of the sandbox containers whose owner label names a process of this machine with pid `server_pid`
    (running or not), with `filters` (`label=...`) as well."""
    listed = subprocess.run(["docker", "ps", "-a", "--filter", "label=envkit.sandbox",
                             *[part for each in filters for part in ("--filter", each)],
                             "--format", '{{.ID}} {{.Label "envkit.sandbox"}}'], capture_output=True, text=True).stdout
    return [line.split()[0] for line in listed.splitlines()
            if len(line.split()) == 2 and line.split()[1].split(".")[2:3] == [str(server_pid)]]


def _cgroups(pattern: str) -> list[Path]:
    """The cgroup folders named `pattern`, in every controller; walked again when one goes while it is walked
    (other servers on this machine remove theirs meanwhile)."""
    for _ in range(10):
        try:
            return [path for root in Path("/sys/fs/cgroup").glob("*") for path in root.rglob(pattern)]
        except FileNotFoundError:
            continue
    raise RuntimeError("the cgroup folders kept changing while they were counted")


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
