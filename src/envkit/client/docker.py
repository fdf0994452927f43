"""Start an env's Docker image and connect an `EnvClient` to it: `EnvClient.from_docker_image(image)`.

    with EnvClient.from_docker_image("echo-env", env_vars={"MAX_CONCURRENT_ENVS": "8"}, memory="1g").sync() as env:
        env.reset()

The container listens on a host port Docker picks on 127.0.0.1; the client waits for `/health`,
and closing the client stops and removes the container. A container that exits or never becomes
healthy is removed too, and the tail of its log travels in the `ContainerError`. An image that is
not on the engine is an error at once: envkit never pulls.

Every container carries the label `envkit.owner`, naming its client process for certain (`envkit.owner`: boot, pid
namespace, pid, start time, as sandbox containers are named), and `envkit.client-pid` and `envkit.client-host` to
show; the containers of a client that provably died without closing (killed with -9) can be found and removed:
`envkit containers --remove-orphans`, or `remove_orphans()`. Those of clients in another pid namespace or on another
host sharing the engine, or whose pid was reused, stay.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import EnvConnectionError
from ..owner import current_owner, owner_gone

__all__ = ["ContainerError", "EnvkitContainer", "RunningContainer", "envkit_containers", "remove_orphans",
           "start_container"]

#: The port envkit images serve on inside the container (`ENV PORT=8000` in their Dockerfiles).
CONTAINER_PORT = 8000
#: Labels on every container envkit starts: the client process that owns it (`owner.current_owner`), and its PID
#: and host name to show.
OWNER_LABEL = "envkit.owner"
CLIENT_PID_LABEL = "envkit.client-pid"
CLIENT_HOST_LABEL = "envkit.client-host"


class ContainerError(EnvConnectionError):
    """The container could not be started, exited, or never answered `/health`; `logs` holds its last lines."""

    def __init__(self, image: str, reason: str, logs: str = "") -> None:
        tail = [line.strip() for line in logs.splitlines() if line.strip()][-3:]
        super().__init__(f"docker image {image!r}", _one_line(reason) + (
            f"; its log ends: {_one_line(' | '.join(tail))[-400:]}" if tail else ""))
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
                    env_vars: dict[str, str] | None = None, memory: str | int | None = None,
                    cpus: float | None = None, pids_limit: int | None = None, startup_timeout: float = 120.0,
                    poll_interval: float = 0.5, run_options: dict[str, Any] | None = None) -> RunningContainer:
    """Run `image` detached with `container_port` published on a free 127.0.0.1 port; wait until `/health` answers.

    Args:
        image: the image to run (e.g. one built from an env folder's Dockerfile); it must be on the engine.
        docker_client: a `docker.DockerClient`; default `docker.from_env()` (honours DOCKER_HOST).
        container_port: the port the server listens on inside the container.
        env_vars: environment of the container, e.g. `{"MAX_CONCURRENT_ENVS": "8"}`.
        memory: the container's memory limit, bytes or a string such as `"512m"`.
        cpus: how many CPUs' worth of time the container may use, e.g. `1.5`.
        pids_limit: the most processes (and threads) the container may hold.
        startup_timeout: seconds to wait for a healthy server before giving up (the container is removed).
        poll_interval: seconds between health probes.
        run_options: further keyword arguments for the SDK's `containers.create` (e.g. `volumes`, `command`).

    Raises:
        ContainerError: no Docker engine, an image not on the engine, the container exited, or it never became
            healthy; one line, with the tail of the container's log when it ran.
    """
    import docker
    from docker.errors import DockerException, ImageNotFound

    options: dict[str, Any] = {"mem_limit": memory, "nano_cpus": None if cpus is None else round(cpus * 1e9),
                               "pids_limit": pids_limit}
    options = {name: value for name, value in options.items() if value is not None} | dict(run_options or {})
    options["labels"] = {OWNER_LABEL: current_owner(), CLIENT_PID_LABEL: str(os.getpid()),
                         CLIENT_HOST_LABEL: socket.gethostname(),
                         **options.get("labels", {})}
    try:
        client = docker_client or docker.from_env()
        # `create` never pulls (`containers.run` would try a registry for a missing image).
        container = client.containers.create(image, environment=dict(env_vars or {}),
                                             ports={f"{container_port}/tcp": ("127.0.0.1", None)}, **options)
    except ImageNotFound:
        raise ContainerError(image, f"image {image!r} not found here; build it first, e.g. "
                                    f"`docker build -t {image} path/to/env/build/space` after "
                                    "`envkit push path/to/env --dry-run` (envkit never pulls)") from None
    except DockerException as error:
        raise ContainerError(image, f"cannot start a container ({error}); is the Docker engine running and "
                                    "DOCKER_HOST right?") from None
    try:
        container.start()
        url = _wait_until_healthy(image, container, container_port, startup_timeout, poll_interval)
    except BaseException as error:
        _remove(container, 5.0)
        if isinstance(error, DockerException):
            raise ContainerError(image, f"cannot start a container ({error})", _logs(container)) from None
        raise
    return RunningContainer(image, container, url)


def _wait_until_healthy(image: str, container: Any, container_port: int, startup_timeout: float,
                        poll_interval: float) -> str:
    deadline = time.monotonic() + startup_timeout
    url = None
    last_problem = "no answer yet"
    while True:
        container.reload()
        if container.status in ("exited", "dead"):
            code = container.attrs.get("State", {}).get("ExitCode")
            raise ContainerError(image, f"the container exited (code {code}) before serving", _logs(container))
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
            raise ContainerError(image, f"not healthy in {startup_timeout:g} s ({last_problem}); the container "
                                        "was removed", _logs(container))
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


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _remove(container: Any, timeout: float) -> None:
    from docker.errors import NotFound

    try:
        container.stop(timeout=int(timeout))
        container.remove(force=True)
    except NotFound:
        pass


# -- containers left behind ----------------------------------------------------------------------


@dataclass
class EnvkitContainer:
    """A container envkit started, and whether the client process that owns it is gone (checked on this host)."""

    id: str
    image: str
    status: str
    client_pid: int
    client_host: str
    orphaned: bool

    def describe(self) -> str:
        """One line: `SHORT_ID  orphaned (client PID gone)  IMAGE  STATUS` or the like."""
        if self.orphaned:
            owner = f"orphaned (client {self.client_pid} gone)"
        elif self.client_host == socket.gethostname():
            owner = f"in use (client {self.client_pid})"
        else:
            owner = f"client {self.client_pid} on {self.client_host}"
        return f"{self.id[:12]}  {owner}  {self.image}  {self.status}"


def envkit_containers(docker_client: Any = None) -> list[EnvkitContainer]:
    """Every container envkit started on the engine (running or not), oldest first.

    A container is orphaned when its owner is provably gone: a process of this boot and pid namespace that no longer
    runs (a reused pid names another process). One without an owner label (an older envkit's) never is.
    """
    import docker

    client = docker_client or docker.from_env()
    found = []
    for container in reversed(client.containers.list(all=True, filters={"label": CLIENT_PID_LABEL})):
        pid, host = int(container.labels[CLIENT_PID_LABEL]), container.labels.get(CLIENT_HOST_LABEL, "")
        found.append(EnvkitContainer(container.id, container.attrs["Config"]["Image"], container.status, pid, host,
                                     owner_gone(container.labels.get(OWNER_LABEL, ""))))
    return found


def remove_orphans(docker_client: Any = None) -> list[EnvkitContainer]:
    """Remove the orphaned envkit containers (see `envkit_containers`); returns those removed."""
    import docker
    from docker.errors import NotFound

    client = docker_client or docker.from_env()
    removed = []
    for found in envkit_containers(client):
        if found.orphaned:
            try:
                client.containers.get(found.id).remove(force=True)
            except NotFound:   # removed meanwhile by someone else
                continue
            removed.append(found)
    return removed
