"""Small Harbor tasks made in a test's folder, and what the Harbor tests share.

    make_task(root / "hello", solve="echo hello > /app/hello.txt", test=CHECK_HELLO)

Every task is built on python:3.11-slim, the base image the project's Docker engine holds.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from docker_engine import engine_host, skip_without_engine
from sandbox_helpers import owned_containers

REWARD = "/logs/verifier/reward.txt"
#: A test.sh body: reward 1 when /app/hello.txt says hello.
CHECK_HELLO = f'if [ "$(cat /app/hello.txt 2>/dev/null)" = hello ]; then echo 1 > {REWARD}; else echo 0 > {REWARD}; fi'


def require_engine() -> None:
    """Skip (or fail under ENVKIT_REQUIRE_DOCKER=1) without an engine; point DOCKER_HOST at it."""
    skip_without_engine()
    os.environ["DOCKER_HOST"] = engine_host()


def make_task(folder: Path, *, solve: str, test: str, instruction: str = "Write hello to /app/hello.txt.",
              toml: str = "", dockerfile: str = "FROM python:3.11-slim\nWORKDIR /app\n",
              verifier_timeout_s: int = 30) -> Path:
    """A Harbor task folder with these scripts (bash bodies) and extra task.toml lines."""
    (folder / "environment").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "solution").mkdir()
    (folder / "instruction.md").write_text(instruction + "\n")
    (folder / "task.toml").write_text('schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n[verifier]\n'
                                      f'timeout_sec = {verifier_timeout_s}\n{toml}')
    (folder / "environment" / "Dockerfile").write_text(dockerfile)
    (folder / "tests" / "test.sh").write_text(f"#!/bin/bash\nmkdir -p /logs/verifier\n{test}\n")
    (folder / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve}\n")
    return folder


def task_containers(server_pid: int) -> list[str]:
    """The containers a server started for task sessions, running or not."""
    return owned_containers(server_pid, "label=envkit.harbor.task")


@pytest.fixture
def no_warm_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Task containers only for sessions: a warm pool would hold started ones beyond any session."""
    from envkit.sandbox import close_pools

    monkeypatch.setenv("ENVKIT_SANDBOX_WARM", "0")
    close_pools()


@contextmanager
def task_container_starts(server_pid: int, *, times: bool = False) -> Iterator[list]:
    """The task containers the server with `server_pid` starts while inside, as the engine's event stream tells
    them (a list that fills as they come: their owners, or with `times` the engine's times of their starts in
    seconds). Streamed: the engine replays only its last 256 events, which other processes sharing it may fill."""
    since = f"{time.time() - 1:.3f}"
    fields = '{{index .Actor.Attributes "envkit.sandbox"}} {{.TimeNano}}'
    process = subprocess.Popen(["docker", "events", "--since", since, "--filter", "event=start", "--filter",
                                "label=envkit.harbor.task", "--format", fields], stdout=subprocess.PIPE, text=True)
    started: list = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            owner, nanoseconds = line.split()
            if owner.split(".")[2:3] == [str(server_pid)]:
                started.append(int(nanoseconds) / 1e9 if times else owner)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield started
    finally:
        process.terminate()
        process.wait()
