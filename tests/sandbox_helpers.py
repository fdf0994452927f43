"""What the sandbox tests share: the backends to run on (each skipped, saying why, where it cannot run here) and a
count of what sandboxes leave on the host."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from envkit.sandbox import SandboxUnavailableError
from envkit.sandbox.base import Uids
from envkit.sandbox.cgroups import PREFIX


def _skip_reason(backend: str) -> str | None:
    try:
        if backend == "local":
            from envkit.sandbox.local import local_facilities
            local_facilities()
        else:
            from envkit.sandbox.docker import docker_facilities
            docker_facilities().check_image("python:3.11-slim")
    except SandboxUnavailableError as error:
        return str(error)
    return None


BACKENDS = [pytest.param(name, marks=pytest.mark.skipif(bool(reason := _skip_reason(name)), reason=reason or ""))
            for name in ("local", "docker")]


def sandbox_processes() -> list[str]:
    """Host processes running as a sandbox uid (every process inside a sandbox runs as one)."""
    listed = subprocess.run(["ps", "-eo", "uid=,pid=,args="], capture_output=True, text=True).stdout
    return [line for line in listed.splitlines() if int(line.split()[0]) >= Uids.BASE]


def leftovers() -> dict[str, int]:
    """Sandbox processes, cgroups and containers on this machine, and the host's mount count."""
    cgroups = [path for root in Path("/sys/fs/cgroup").glob("*") for path in root.rglob(PREFIX + "*")]
    containers = 0
    if _skip_reason("docker") is None:
        listed = subprocess.run(["docker", "ps", "-aq", "--filter", "label=envkit.sandbox"], capture_output=True,
                                text=True).stdout
        containers = len(listed.split())
    return {"processes": len(sandbox_processes()), "cgroups": len(cgroups), "containers": containers,
            "mounts": len(Path("/proc/self/mountinfo").read_text().splitlines())}
