"""The Docker engine the Docker tests run against: DOCKER_HOST's, else the one scripts/docker_engine.sh starts.

    from docker_engine import docker_engine  # a fixture: a `docker.DockerClient`, or the test skips

Images are built with the docker CLI as a user would (`docker build --network host`: the engine runs in isolated
mode, so a build has no route out but the host's), once per test session each.

Without an engine the tests skip with one line saying how to start one; with ENVKIT_REQUIRE_DOCKER=1 (set by
.ci/run, which starts the engine) that line fails the test instead.
"""

from __future__ import annotations

import os
import itertools
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
ENGINE_SCRIPT = REPO / "scripts" / "docker_engine.sh"
#: Tags of the images the tests build; `docker image ls 'envkit-test-*'` lists them.
TAG_PREFIX = "envkit-test-"
_built: dict[str, str] = {}   # tag -> image id, for this test session
_containers = itertools.count()


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


def own_containers(client: Any, image: str) -> list[Any]:
    """The containers of `image` (running or not) but those another process's client started: the engine may be
    shared with other test runs. Containers without envkit's labels count as this process's."""
    return [container for container in client.containers.list(all=True, filters={"ancestor": image})
            if container.labels.get("envkit.client-pid", str(os.getpid())) == str(os.getpid())]


def envkit_cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `envkit ARGS` in a subprocess (this checkout's envkit)."""
    return subprocess.run([sys.executable, "-m", "envkit.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def build_image(name: str, context: Path) -> str:
    """`docker build` CONTEXT as `envkit-test-NAME` once per test session; returns the tag."""
    tag = TAG_PREFIX + name
    if tag not in _built:
        done = subprocess.run(["docker", "build", "--network", "host", "--quiet", "--tag", tag, str(context)],
                              capture_output=True, text=True, timeout=900,
                              env={**os.environ, "DOCKER_HOST": engine_host(), "DOCKER_BUILDKIT": "0"})
        assert done.returncode == 0, f"docker build of {context} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
        _built[tag] = done.stdout.strip()
    return tag


def staged_env_image(name: str, env_folder: Path, stage_dir: Path) -> str:
    """The image of an env folder as its Space builds it: `envkit push --dry-run`, then `docker build` the stage."""
    if TAG_PREFIX + name not in _built:
        staged = envkit_cli("push", str(env_folder), "--dry-run", "--stage-dir", str(stage_dir))
        assert staged.returncode == 0, staged.stderr
    return build_image(name, stage_dir)


@pytest.fixture(scope="session")
def root_image(docker_engine: Any) -> str:
    """The repository's own image (the top-level Dockerfile)."""
    return build_image("root", REPO)


@contextmanager
def serving_image(image: str, *command: str, options: tuple[str, ...] = ()) -> Iterator[str]:
    """A container of `image` started with a plain `docker run` (plus `options`; the engine's default seccomp
    profile, no added capability, the image's own user), its port 8000 on a free 127.0.0.1 port; yields its URL once
    `/health` answers, and removes the container after."""
    import httpx

    name = f"envkit-test-{os.getpid()}-{next(_containers)}"
    started = subprocess.run(["docker", "run", "-d", "--rm", "--name", name, "-p", "127.0.0.1::8000", *options, image,
                              *command], capture_output=True, text=True, env={**os.environ, "DOCKER_HOST": engine_host()})
    assert started.returncode == 0, started.stderr
    try:
        port = subprocess.run(["docker", "port", name, "8000"], capture_output=True, text=True,
                              env={**os.environ, "DOCKER_HOST": engine_host()}).stdout.split(":")[-1].strip()
        url = f"http://127.0.0.1:{port}"
        for _ in range(240):
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        yield url
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, env={**os.environ, "DOCKER_HOST": engine_host()})
