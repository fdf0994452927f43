"""`envkit serve TARGET`: serve a bundled env, an env folder or `module:Class` over WebSocket."""

from __future__ import annotations

import logging
import os
from typing import Any

import click

from ..app.settings import CONCURRENT_SESSIONS, ServerSettings
from ..core.access import is_loopback_host
from .options import CommandNamingBundled, default_of
from .scale_out import ScaleOut, scale_out_options


def _default(name: str) -> Any:
    return default_of(ServerSettings, name)


@click.command("serve", cls=CommandNamingBundled)
@click.argument("target")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="Port (0: any free port).")
@click.option("--max-concurrent-envs", type=click.IntRange(min=1), default=None,
              help=f"Sessions open at once [default: $MAX_CONCURRENT_ENVS, else {CONCURRENT_SESSIONS}, or 1 for "
                   "single-session envs].")
@click.option("--session-timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help=f"Close sessions idle this many seconds [default: $SESSION_TIMEOUT_S, else "
                   f"{_default('session_timeout_s'):g}].")
@click.option("--capacity-wait", type=click.FloatRange(min=0), default=_default("capacity_wait_s"), show_default=True,
              help="When every slot is taken, a new connection waits this many seconds for a closing session's "
                   "slot before it is refused.")
@click.option("--ping-interval", type=click.FloatRange(min=0), default=_default("ping_interval_s"), show_default=True,
              help="Ping each client every this many seconds (0: never), so a vanished client frees its slot.")
@click.option("--ping-timeout", type=click.FloatRange(min=0, min_open=True), default=_default("ping_timeout_s"),
              show_default=True,
              help="End a session whose client has not answered a ping within this many seconds.")
@click.option("--api-key-env", metavar="NAME", default=None,
              help="Require the API key held in environment variable NAME on every route but /health "
                   "[default: $ENVKIT_API_KEY if set, else no key]. The key itself never goes on the command line.")
@click.option("--allow-origin", "allow_origins", multiple=True, metavar="URL",
              help="Let browser pages at this origin (https://app.example.com, or *) use the server; repeatable. "
                   "Pages served by this server itself always may.")
@click.option("--allowed-hosts", default=None, metavar="NAMES",
              help="Comma-separated Host names the server answers to (example.com, *.example.com, host:port, *) "
                   "[default: 127.0.0.1, localhost, ::1 when --host is a loopback address; any otherwise].")
@click.option("--max-sessions-per-client", type=click.IntRange(min=1), default=None,
              help="Sessions one client address may hold at once [default: no limit].")
@click.option("--forwarded-allow-ips", default=None, metavar="IPS",
              help="Comma-separated proxies (IPs, networks, 'private', '*') whose X-Forwarded-For names the client "
                   "for --max-sessions-per-client [default: $FORWARDED_ALLOW_IPS; on a Hugging Face Space "
                   "(SPACE_ID set) 'private'; else none].")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]),
              help="Server log level; debug also logs a line per WebSocket handshake.")
@scale_out_options
def command(target: str, host: str, port: int, max_concurrent_envs: int | None, session_timeout: float | None,
            capacity_wait: float, ping_interval: float, ping_timeout: float, api_key_env: str | None,
            allow_origins: tuple[str, ...], allowed_hosts: str | None, max_sessions_per_client: int | None,
            forwarded_allow_ips: str | None, log_level: str, scale_out: ScaleOut) -> None:
    """Serve TARGET over WebSocket at /ws (with /health, /schema, /metadata, /tools, /metrics), to MCP
    clients at /mcp and over the Open Reward Standard at the root (/create_session, /create, /call, ...).

    http://HOST:PORT/web (and / redirects there) is a page to play the environment in a browser
    and to replay transcripts.

    TARGET is a bundled env name ({bundled}), a path to an env folder, or module:Class.
    The server runs on the C allocator (PYTHONMALLOC=malloc) so that the memory of closed sessions
    goes back to the OS; set PYTHONMALLOC yourself to choose another.

    \b
    Examples:
      envkit serve echo --port 8001 --max-concurrent-envs 64
      envkit serve ./my_env
      envkit serve my_package.env:MyEnvironment --session-timeout 60
      envkit serve echo --workers 4 --max-concurrent-envs 256
      envkit serve echo --ray 10.0.0.1:6379 --replicas 8 --num-cpus 1
      ENVKIT_API_KEY=... envkit serve echo --host 0.0.0.0 \\
          --max-sessions-per-client 4
    """
    scale_out.check()
    from ..transport.ports import ListenError, check_listen
    from ..transport.uvicorn_server import run_server
    from ..app.targets import app_from_environment, resolve_target

    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    resolved = resolve_target(target)   # a bad target or environment definition: one line (envkit.cli.main)
    given: dict[str, Any] = {"capacity_wait_s": capacity_wait, "ping_interval_s": ping_interval or None,
                             "ping_timeout_s": ping_timeout, "allowed_origins": allow_origins}
    for name, value in (("max_concurrent_envs", max_concurrent_envs), ("session_timeout_s", session_timeout),
                        ("max_sessions_per_client", max_sessions_per_client)):
        if value is not None:
            given[name] = value
    if allowed_hosts is not None:
        given["allowed_hosts"] = allowed_hosts.split(",")
    if forwarded_allow_ips is not None:
        given["forwarded_allow_ips"] = forwarded_allow_ips.split(",")
    settings = ServerSettings.from_environment(concurrent=resolved.env_class.SUPPORTS_CONCURRENT_SESSIONS,
                                               api_key_variable=api_key_env, **given)
    app = app_from_environment(resolved.env_class, env_name=resolved.name, settings=settings)
    pool = app.state.envkit_pool
    if not app.access.requires_key and not is_loopback_host(host):
        click.echo(f"envkit: warning: serving on {host} without an API key: anyone who can reach this address can "
                   "open sessions; set one with ENVKIT_API_KEY or --api-key-env NAME", err=True)
    if scale_out.requested:
        return scale_out.serve(target, resolved, settings, host, port, log_level)
    try:  # before the server starts, so a busy port is one line, not a traceback after "startup complete"
        check_listen(host, port)
    except ListenError as error:
        raise click.ClickException(str(error)) from None

    def announce(bound_port: int) -> None:
        click.echo(f"envkit: serving {resolved.name} on http://{host}:{bound_port} (WebSocket ws://{host}:{bound_port}/ws, "
                   f"max {pool.max_sessions} sessions, idle timeout {pool.idle_timeout_s}s, pid {os.getpid()})",
                   err=False)
        click.echo(f"envkit: play and replay in a browser at http://{host}:{bound_port}/web")

    run_server(app, host, port, on_started=announce, log_level=log_level)
