"""Start an env's Docker image and connect an `EnvClient` to it: `EnvClient.from_docker_image(image)`.

    with EnvClient.from_docker_image("echo-env", env_vars={"MAX_CONCURRENT_ENVS": "8"}).sync() as env:
        env.reset()

The container listens on a host port Docker picks on 127.0.0.1; the client waits for `/health`,
and closing the client stops and removes the container. A container that exits or never becomes
healthy is removed too, and its last log lines travel in the `ContainerError`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import EnvConnectionError

__all__ = ["ContainerError", "RunningContainer", "start_container"]

#: The port envkit images serve on inside the container (`ENV PORT=8000` in their Dockerfiles).
CONTAINER_PORT = 8000


class ContainerError(EnvConnectionError):
    """The container could not be started, exited, or never answered `/health`; `logs` holds its last lines."""

    def __init__(self, image: str, reason: str, logs: str = "") -> None:
        super().__init__(f"docker image {image!r}", reason + (f"\n--- container log (last lines) ---\n{logs}" if logs else ""))
        self.image = image
        self.logs = logs


@dataclass
class RunningContainer:
    """A started, healthy env container and the URL it serves on."""

    image: str
    container: Any
    url: str

    def stop(self, timeout: float = 10.0) -> None:
        """Stop and remove the container; safe to call more than once."""
        _remove(self.container, timeout)


def start_container(image: str, *, docker_client: Any = None, container_port: int = CONTAINER_PORT,
                    env_vars: dict[str, str] | None = None, startup_timeout: float = 120.0,
                    poll_interval: float = 0.5, run_options: dict[str, Any] | None = None) -> RunningContainer:
    """Run `image` detached with `container_port` published on a free 127.0.0.1 port; wait until `/health` answers.

    Args:
        image: the image to run (e.g. one built from an env folder's Dockerfile).
        docker_client: a `docker.DockerClient`; default `docker.from_env()` (honours DOCKER_HOST).
        container_port: the port the server listens on inside the container.
        env_vars: environment of the container, e.g. `{"MAX_CONCURRENT_ENVS": "8"}`.
        startup_timeout: seconds to wait for a healthy server before giving up (the container is removed).
        poll_interval: seconds between health probes.
        run_options: further keyword arguments for `containers.run` (e.g. `mem_limit`).

    Raises:
        ContainerError: no Docker engine, unknown image, the container exited, or it never became healthy.
    """
    import docker
    from docker.errors import DockerException, ImageNotFound

    try:
        client = docker_client or docker.from_env()
        container = client.containers.run(image, detach=True, environment=dict(env_vars or {}),
                                          ports={f"{container_port}/tcp": ("127.0.0.1", None)}, **(run_options or {}))
    except ImageNotFound:
        raise ContainerError(image, f"image {image!r} not found; build it first, e.g. "
                                    f"`docker build -t {image} path/to/env` (after `envkit push --dry-run`)") from None
    except DockerException as error:
        raise ContainerError(image, f"cannot start a container ({error}); is the Docker engine running and "
                                    "DOCKER_HOST right?") from None
    try:
        url = _wait_until_healthy(image, container, container_port, time.monotonic() + startup_timeout, poll_interval)
    except BaseException:
        _remove(container, 5.0)
        raise
    return RunningContainer(image, container, url)


def _wait_until_healthy(image: str, container: Any, container_port: int, deadline: float, poll_interval: float) -> str:
    url = None
    last_problem = "no answer yet"
    while True:
        container.reload()
        if container.status in ("exited", "dead"):
            raise ContainerError(image, f"the container {container.status} before serving", _logs(container))
        url = url or _published_url(container, container_port)
        if url is not None:
            try:
                response = httpx.get(url + "/health", timeout=2.0, trust_env=False)
                if response.status_code == 200 and response.json().get("status") == "healthy":
                    return url
                last_problem = f"/health answered HTTP {response.status_code}: {response.text[:200]}"
            except (httpx.HTTPError, ValueError) as error:
                last_problem = f"{type(error).__name__}: {error}"
        if time.monotonic() > deadline:
            raise ContainerError(image, f"not healthy in time ({last_problem}); the container was removed",
                                 _logs(container))
        time.sleep(poll_interval)


def _published_url(container: Any, container_port: int) -> str | None:
    bindings = ((container.attrs.get("NetworkSettings") or {}).get("Ports") or {}).get(f"{container_port}/tcp")
    if not bindings:
        return None
    return f"http://127.0.0.1:{bindings[0]['HostPort']}"


def _logs(container: Any) -> str:
    try:
        raw = container.logs(tail=30)
    except Exception:  # the log is a courtesy; the container may already be gone
        return ""
    return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)


def _remove(container: Any, timeout: float) -> None:
    from docker.errors import NotFound

    try:
        container.stop(timeout=int(timeout))
        container.remove(force=True)
    except NotFound:
        pass
