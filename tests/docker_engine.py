"""The Docker engine the Docker tests run against: DOCKER_HOST's, else the one scripts/docker_engine.sh starts.

    from docker_engine import docker_engine  # a fixture: a `docker.DockerClient`, or the test skips

Without an engine the tests skip with one line saying how to start one; with ENVKIT_REQUIRE_DOCKER=1 (set by
.ci/run, which starts the engine) that line fails the test instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
ENGINE_SCRIPT = REPO / "scripts" / "docker_engine.sh"


def engine_host() -> str:
    """The engine's address: DOCKER_HOST when set, else the socket under ENVKIT_DOCKER_DIR (the script's folder)."""
    folder = Path(os.environ.get("ENVKIT_DOCKER_DIR", "/tmp/envkit-docker"))
    return os.environ.get("DOCKER_HOST") or f"unix://{folder / 'docker.sock'}"


def engine_problem() -> str | None:
    """None when an engine answers at `engine_host()`; otherwise one line saying why not."""
    import docker
    from docker.errors import DockerException

    try:
        docker.DockerClient(base_url=engine_host(), timeout=10).ping()
    except DockerException as error:
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        return (f"no Docker engine answers at {engine_host()} ({first_line[:120]}); "
                f"start one: sudo bash {ENGINE_SCRIPT.relative_to(REPO)} start")
    return None


def skip_without_engine() -> None:
    """Skip the calling test when no engine answers, or fail it under ENVKIT_REQUIRE_DOCKER=1."""
    problem = engine_problem()
    if problem is None:
        return
    if os.environ.get("ENVKIT_REQUIRE_DOCKER") == "1":
        pytest.fail(f"ENVKIT_REQUIRE_DOCKER=1 but {problem}", pytrace=False)
    pytest.skip(problem)


@pytest.fixture(scope="session")
def docker_engine() -> Any:
    """A `docker.DockerClient` for the engine; DOCKER_HOST is set to it for subprocesses (docker CLI, envkit)."""
    import docker

    skip_without_engine()
    os.environ["DOCKER_HOST"] = engine_host()
    client = docker.DockerClient(base_url=engine_host(), timeout=120)
    yield client
    client.close()
