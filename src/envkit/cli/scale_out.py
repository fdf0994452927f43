"""The scale-out flags of `envkit serve`: `--workers N` on one machine, `--ray [ADDRESS] --replicas N` on a cluster.

`scale_out_options` adds the flags to the command and hands them to it as one `ScaleOut`; the
command calls `ScaleOut.serve(...)` when one was asked for. Ray is imported only for `--ray`.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import click

from ..app.settings import ServerSettings

__all__ = ["ScaleOut", "scale_out_options"]

#: Servers `--ray` runs without `--replicas`, and the CPUs Ray reserves for each without `--num-cpus`.
DEFAULT_REPLICAS, DEFAULT_NUM_CPUS = 2, 1.0


@dataclass(frozen=True)
class ScaleOut:
    """How many servers `envkit serve` runs, and where."""

    workers: int = 1
    ray_address: str | None = None
    replicas: int | None = None
    num_cpus: float | None = None
    max_restarts: int = -1

    @property
    def requested(self) -> bool:
        return self.workers > 1 or self.ray_address is not None

    def check(self) -> None:
        """Raise `click.UsageError` for flags that do not go together."""
        if self.ray_address is None and (self.replicas is not None or self.num_cpus is not None
                                         or self.max_restarts != -1):
            raise click.UsageError("--replicas, --num-cpus and --max-restarts place servers on a Ray cluster; "
                                   "add --ray [ADDRESS]")
        if self.ray_address is not None and self.workers > 1:
            raise click.UsageError("--workers runs servers on this machine and --ray on a Ray cluster; pass one "
                                   "(for more processes on the cluster, raise --replicas)")

    def serve(self, target: str, resolved: Any, settings: ServerSettings, host: str, port: int,
              log_level: str) -> None:
        """Serve as the flags say until SIGINT/SIGTERM; exits non-zero when the servers cannot start."""
        if self.ray_address is not None:
            self._serve_on_ray(target, settings, host, port, log_level)
        else:
            self._serve_workers(resolved, settings, host, port, log_level)

    def _serve_workers(self, resolved: Any, settings: ServerSettings, host: str, port: int, log_level: str) -> None:
        from ..app.targets import app_from_environment
        from ..scale.workers import serve_workers

        make_app = functools.partial(app_from_environment, resolved.env_class, env_name=resolved.name, settings=settings)

        def announce(bound_port: int, board: Any) -> None:
            shares = "/".join(str(share) for share in board.shares)
            click.echo(f"envkit: serving {resolved.name} on http://{host}:{bound_port} (WebSocket "
                       f"ws://{host}:{bound_port}/ws, max {board.max_sessions} sessions over {self.workers} workers "
                       f"sharing the port, shares {shares}, pid {os.getpid()})")

        try:
            code = serve_workers(make_app, host, port, self.workers, log_level=log_level, on_started=announce)
        except OSError as error:
            raise click.ClickException(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
        if code:
            raise click.ClickException("the workers did not start; see the log above")

    def _serve_on_ray(self, target: str, settings: ServerSettings, host: str, port: int, log_level: str) -> None:
        try:
            from ..scale.ray_serve import RayServeError, serve_on_ray
        except ImportError as error:
            raise click.UsageError(f"--ray needs Ray ({error}); install it with: pip install 'envkit[ray]'") from None
        if Path(target).exists():   # an env folder: the replicas find it by absolute path
            target = str(Path(target).resolve())
        try:
            serve_on_ray(target, settings, address=self.ray_address or None, replicas=self.replicas or DEFAULT_REPLICAS,
                         num_cpus=self.num_cpus if self.num_cpus is not None else DEFAULT_NUM_CPUS,
                         max_restarts=self.max_restarts, host=host, port=port, log_level=log_level,
                         say=click.echo)
        except RayServeError as error:
            raise click.ClickException(str(error)) from None


def scale_out_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add `--workers`, `--ray`, `--replicas`, `--num-cpus`, `--max-restarts`; the command gets `scale_out=ScaleOut(...)`."""

    @functools.wraps(command)
    def wrapped(*args: Any, workers: int, ray: str | None, replicas: int | None, num_cpus: float | None,
                max_restarts: int, **kwargs: Any) -> Any:
        return command(*args, scale_out=ScaleOut(workers, ray, replicas, num_cpus, max_restarts), **kwargs)

    options = [
        click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Server processes on this machine behind the one port; --max-concurrent-envs is their "
                          "whole's limit (each holds about an N-th); one that dies is restarted (only its sessions "
                          "are lost). /health answers for all of them."),
        click.option("--ray", "ray", is_flag=False, flag_value="", default=None, metavar="[ADDRESS]",
                     help="Run the servers as actors on a Ray cluster (ADDRESS: e.g. 10.0.0.1:6379; none: the cluster "
                          "Ray finds or starts); --host/--port are then the registry's, which lists the live "
                          "servers at /replicas; each server has --max-concurrent-envs. Needs envkit[ray]."),
        click.option("--replicas", type=click.IntRange(min=1), default=None,
                     help=f"With --ray: envkit servers to run, spread over the cluster's nodes. [default: {DEFAULT_REPLICAS}]"),
        click.option("--num-cpus", type=click.FloatRange(min=0), default=None,
                     help=f"With --ray: CPUs Ray reserves for each server. [default: {DEFAULT_NUM_CPUS:g}]"),
        click.option("--max-restarts", type=click.IntRange(min=-1), default=-1, show_default=True,
                     help="With --ray: times Ray restarts a server that dies (-1: always)."),
    ]
    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped

