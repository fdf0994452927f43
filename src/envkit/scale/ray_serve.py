"""`envkit serve TARGET --ray [ADDRESS] --replicas N`: envkit servers placed and restarted by Ray.

Ray places N envkit servers as actors spread over the cluster's nodes and restarts one that dies
(`max_restarts`). Each actor runs an ordinary envkit server (uvicorn) on its own node's address
and a port of its own; clients connect to it directly (Ray Serve's HTTP proxy is not used: it
costs milliseconds of CPU per step and cuts sockets on redeploy). The process that ran
`envkit serve` holds the registry (`envkit.scale.registry`) on `--host:--port`; every server registers
there, so `http://HOST:PORT/replicas` lists the live ones and clients spread sessions over them.

Ctrl-C (SIGINT) or SIGTERM stops every server the way a single server stops (sessions closed
with 1001), then the registry. The actors belong to this process: if it is killed outright,
Ray ends them too.

Every node needs envkit and the environment installed (an env folder at the same path).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from typing import Any, Callable

import ray

from ..app.settings import ServerSettings
from ..errors import EnvkitError

__all__ = ["EnvkitReplica", "RayServeError", "serve_on_ray", "start_replicas"]

#: Seconds to wait for the replicas to come up (Ray may have to start worker processes on every node).
STARTUP_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 20.0


class RayServeError(EnvkitError):
    """The servers could not be placed on the Ray cluster."""


class EnvkitReplica:
    """One envkit server inside a Ray actor, registered with the registry while it lives.

    Built again by Ray in a fresh process when the actor restarts; it then listens on a new port
    and registers again.
    """

    def __init__(self, target: str, settings: ServerSettings, registry_url: str, replica: int,
                 log_level: str = "warning") -> None:
        import asyncio

        from .registry import RegistryClient
        from ..transport.uvicorn_server import EnvkitServer, server_config
        from ..app.targets import app_from_environment, resolve_target

        resolved = resolve_target(target)
        app = app_from_environment(resolved.env_class, env_name=resolved.name, settings=settings)
        pool = app.state.envkit_pool
        host = ray.util.get_node_ip_address()
        self.node_id = ray.get_runtime_context().get_node_id()
        self.replica = replica
        started = threading.Event()

        def on_started(port: int) -> None:
            self.url = f"http://{host}:{port}"
            describe = {"url": self.url, "replica": replica, "pid": os.getpid(), "node": self.node_id,
                        "env": resolved.name}
            load = lambda: {"active_sessions": pool.active, "max_sessions": pool.max_sessions}  # noqa: E731
            self._registration = asyncio.get_running_loop().create_task(
                RegistryClient(registry_url, describe, load).run())
            started.set()

        self.server = EnvkitServer(server_config(app, host, 0, log_level=log_level), on_started)
        self.thread = threading.Thread(target=self.server.run, name="envkit-replica", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not started.wait(0.05):
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"replica {replica}: the envkit server did not start on {host}")

    def info(self) -> dict[str, Any]:
        """Where this replica serves: URL, process and node."""
        return {"url": self.url, "pid": os.getpid(), "node": self.node_id, "replica": self.replica}

    def stop(self) -> None:
        """Close every session with 1001 and stop the server."""
        self.server.should_exit = True
        self.thread.join(STOP_TIMEOUT_S)


def start_replicas(target: str, settings: ServerSettings, registry_url: str, *, replicas: int, num_cpus: float,
                   max_restarts: int = -1, log_level: str = "warning") -> list[Any]:
    """Create `replicas` `EnvkitReplica` actors, spread over the nodes; returns their handles once all serve."""
    actor_class = ray.remote(EnvkitReplica).options(num_cpus=num_cpus, max_restarts=max_restarts,
                                                     max_task_retries=0, scheduling_strategy="SPREAD")
    handles = [actor_class.remote(target, settings, registry_url, index, log_level) for index in range(replicas)]
    try:
        ray.get([handle.info.remote() for handle in handles], timeout=STARTUP_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        stop_replicas(handles)
        raise RayServeError(f"the {replicas} replicas did not all start within {STARTUP_TIMEOUT_S:g}s; does the "
                            f"cluster have {replicas} x {num_cpus:g} free CPUs (ray status)?") from None
    except ray.exceptions.RayActorError as error:
        stop_replicas(handles)
        raise RayServeError(f"a replica failed to start: {error}") from None
    return handles


def stop_replicas(handles: list[Any]) -> None:
    """Stop each replica gracefully (1001 to its sessions), then end its actor for good."""
    pending = [handle.stop.remote() for handle in handles]
    try:
        ray.wait(pending, num_returns=len(pending), timeout=STOP_TIMEOUT_S)
    finally:
        for handle in handles:
            ray.kill(handle, no_restart=True)


def _registry_url_for_nodes(host: str, port: int, node_addresses: set[str]) -> str:
    """The registry's URL as the replicas on every node can reach it; raises when some cannot."""
    if host in ("0.0.0.0", "::", ""):
        return f"http://{ray.util.get_node_ip_address()}:{port}"
    loopback = host == "localhost" or host.startswith("127.") or host == "::1"
    remote = sorted(address for address in node_addresses if not address.startswith("127."))
    if loopback and remote:
        raise RayServeError(f"the registry would listen on {host}, which replicas on other machines ({', '.join(remote)}) "
                            "cannot reach; pass --host 0.0.0.0 or this machine's cluster address")
    return f"http://{host}:{port}"


def _check_reachable(address: str) -> None:
    """Fail in seconds, not never, on an address where no Ray head answers (`ray.init` retries forever)."""
    host, _, port = address.split("://")[-1].rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as error:
        why = error.strerror or str(error)
        raise RayServeError(f"cannot reach the Ray cluster at {address}: nothing answers there ({why}); start one "
                            "with `ray start --head` or give the address `ray status` shows") from None


def serve_on_ray(target: str, settings: ServerSettings, *, address: str | None, replicas: int, num_cpus: float,
                 max_restarts: int = -1, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
                 say: Callable[[str], None] = print) -> None:
    """Run the registry here and `replicas` envkit servers on the Ray cluster at `address` until SIGINT/SIGTERM."""
    from .registry import Registry, create_registry_app
    from ..transport.uvicorn_server import EnvkitServer, server_config

    registry = Registry(expected=replicas)
    registry_server = EnvkitServer(server_config(create_registry_app(registry), host, port, log_level="warning",
                                                 ws_ping_interval=5.0, ws_ping_timeout=5.0))
    registry_thread = threading.Thread(target=registry_server.run, name="envkit-registry", daemon=True)
    registry_thread.start()
    while not registry_server.started:
        if not registry_thread.is_alive():
            raise RayServeError(f"the registry cannot listen on {host}:{port} (is the port taken?)")
        time.sleep(0.02)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    handles: list[Any] = []
    try:
        if address:
            _check_reachable(address)
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=log_level == "debug")
        except (ConnectionError, ValueError, RuntimeError) as error:
            raise RayServeError(f"cannot reach the Ray cluster at {address or 'auto'}: {error}") from None
        nodes = [node for node in ray.nodes() if node["Alive"]]
        registry_url = _registry_url_for_nodes(host, registry_server.port,
                                               {node["NodeManagerAddress"] for node in nodes})
        say(f"envkit: Ray cluster with {len(nodes)} node(s); starting {replicas} replica(s) of {target} "
            f"({num_cpus:g} CPU each)")
        handles = start_replicas(target, settings, registry_url, replicas=replicas, num_cpus=num_cpus,
                                 max_restarts=max_restarts)
        for info in ray.get([handle.info.remote() for handle in handles]):
            say(f"envkit: replica {info['replica']} serving on {info['url']} (node {info['node'][:12]}, "
                f"pid {info['pid']})")
        say(f"envkit: registry listing live replicas at {registry_url}/replicas (pid {os.getpid()}); "
            f"connect clients with EnvClient(\"{registry_url}/replicas\")")
        while not stop.wait(0.5):
            pass
    finally:
        registry.stopping = True
        if handles:
            stop_replicas(handles)
        if ray.is_initialized():
            ray.shutdown()
        registry_server.should_exit = True
        registry_thread.join(10)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
