"""`envkit bench --url URL`: load a running server with concurrent sessions and report what it sustained."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import click

from .options import api_key_option


def _parse_action(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        action = json.loads(raw)
    except json.JSONDecodeError as error:
        raise click.BadParameter(f"not valid JSON ({error}); example: '{{\"message\": \"{{token}}\"}}'",
                                 param_hint="--action") from None
    if not isinstance(action, dict):
        raise click.BadParameter("must be a JSON object of the environment's action fields, "
                                 "e.g. '{\"message\": \"{token}\"}'", param_hint="--action")
    return action


def _progress_printer(enabled: bool) -> Any:
    if not enabled:
        return None

    def show(line: str) -> None:
        click.echo(f"\r\033[K{line}", err=True, nl=False)

    return show


@click.command("bench")
@click.option("--url", "urls", required=True, multiple=True,
              help="The server: ws://HOST:PORT, http://HOST:PORT or either ending in /ws. Several (repeat the flag "
                   "or separate with commas) or a registry (http://HEAD:PORT/replicas): sessions are spread by load.")
@click.option("--sessions", type=click.IntRange(min=1), default=64, show_default=True,
              help="Concurrent sessions (churn: concurrent open/close loops).")
@click.option("--steps", type=click.IntRange(min=0), default=100, show_default=True,
              help="Step round trips per session, one after another.")
@click.option("--action", "action_json", default=None,
              help='Action JSON for each step; "{token}" is replaced by a per-step token that the reply must '
                   'carry [default: {"message": "{token}"}].')
@click.option("--ramp", is_flag=True, help="Find the most sessions held open at once with >= 95% success.")
@click.option("--ramp-start", type=click.IntRange(min=1), default=64, show_default=True, help="First ramp level.")
@click.option("--ramp-max", type=click.IntRange(min=1), default=16384, show_default=True, help="Last ramp level.")
@click.option("--budget", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Time budget of a ramp, in seconds.")
@click.option("--churn", type=click.FloatRange(min=0.1), default=None,
              help="Instead of stepping, open and close sessions for this many seconds; reports sessions/s.")
@click.option("--hold", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Keep all sessions open this many seconds after reset, before the steps.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=120.0, show_default=True,
              help="Stop a load run after this many seconds, whatever is left.")
@click.option("--client", type=click.Choice(["auto", "picows", "raw", "websockets"]), default="auto", show_default=True,
              help="Client library (auto: picows when installed; raw for --churn).")
@click.option("--protocol", type=click.Choice(["ws", "mcp", "ors"]), default="ws", show_default=True,
              help="Surface to step over: the WebSocket protocol, MCP tools/call at /mcp, or the Open Reward "
                   "Standard's /call (an HTTP connection kept alive per session).")
@click.option("--tool", default="echo", show_default=True,
              help="With --protocol mcp or ors: the tool each step calls, with --action as its arguments.")
@click.option("--connect-concurrency", type=click.IntRange(min=1), default=128, show_default=True,
              help="WebSocket handshakes in flight at once.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@api_key_option
def command(urls: tuple[str, ...], sessions: int, steps: int, action_json: str | None, ramp: bool, ramp_start: int, ramp_max: int,
            budget: float, churn: float | None, hold: float, timeout: float, client: str, protocol: str, tool: str,
            connect_concurrency: int,
            as_json: bool, quiet: bool) -> None:
    """Load a running server with concurrent sessions: steps/s, latency, failures and correctness.

    Each session resets, then sends STEPS step frames in sequence; each step carries a token of
    its own and the reply must carry it back (mismatches are counted). With --protocol mcp or ors
    each step is a call of --tool over that surface instead, with the same tokens and checks. All
    sessions connect and reset before any steps and close after the last step reply, so steps/s
    counts stepping only; connect+reset latency is reported apart. Works against envkit and OpenEnv servers alike.

    \b
    Examples:
      envkit bench --url ws://127.0.0.1:8001 --sessions 64 --steps 200
      envkit bench --url ws://127.0.0.1:8001 --ramp --budget 60 --json
      envkit bench --url ws://127.0.0.1:8001 --churn 5 --sessions 16
      envkit bench --url http://127.0.0.1:8001,http://127.0.0.1:8002
      envkit bench --url http://127.0.0.1:8001 --protocol mcp --steps 200
    """
    from ..client.placement import parse_server_urls

    try:
        url = ",".join(parse_server_urls(urls))
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--url") from None
    from ..bench import run_churn, run_load, run_ramp, run_sync
    from ..bench.drivers import driver_class

    if ramp and churn is not None:
        raise click.UsageError("--ramp and --churn measure different things; pass one of them")
    if protocol != "ws" and (ramp or churn is not None):
        raise click.UsageError(f"--protocol {protocol} measures steps only; --ramp and --churn run over ws")
    if ramp and ramp_start > ramp_max:
        raise click.UsageError(f"--ramp-start {ramp_start} is above --ramp-max {ramp_max}")
    action = _parse_action(action_json)
    try:
        driver_class(client)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    _check_key(url)
    progress = _progress_printer(not quiet and sys.stderr.isatty())
    if ramp:
        result: Any = run_sync(run_ramp(url, start=ramp_start, max_sessions=ramp_max, steps=steps, budget_s=budget,
                                        action=action, client=client, connect_concurrency=connect_concurrency,
                                        progress=progress))
        succeeded = any(level["sessions_ok"] for level in result.levels)
        failures = result.levels[-1]["failures"] if result.levels else {}
    elif churn is not None:
        result = run_sync(run_churn(url, churn, workers=sessions, client=client, progress=progress))
        succeeded, failures = result.sessions > 0, result.failures
    else:
        result = run_sync(run_load(url, sessions, steps, action=action, client=client, protocol=protocol, tool=tool,
                                   timeout_s=timeout,
                                   connect_concurrency=connect_concurrency,
                                   on_open=(lambda: asyncio.sleep(hold)) if hold else None, progress=progress))
        succeeded, failures = result.sessions_ok > 0, result.failures
    if progress is not None:
        click.echo("\r\033[K", err=True, nl=False)
    click.echo(json.dumps(result.to_dict()) if as_json else result.text())
    if not succeeded:
        reasons = ", ".join(f"{reason} ({count})" for reason, count in failures.items()) or "no reason recorded"
        hint = _failure_hint(url, failures, action, protocol)
        raise click.ClickException(f"no session succeeded against {url}: {reasons}; {hint}")


_SURFACES = {"mcp": "MCP at /mcp", "ors": "the Open Reward Standard"}


def _failure_hint(url: str, failures: dict[str, int], action: dict[str, Any] | None, protocol: str) -> str:
    """What to do about a run in which no session succeeded, judged from why they failed."""
    refused = any(f"HTTP {status}" in reason for reason in failures for status in (400, 404, 405, 501))
    if protocol in _SURFACES and refused:
        return (f"the server refused the requests that open a session over {_SURFACES[protocol]}: does it serve "
                "that surface? (envkit serve does; bench --protocol ws steps over /ws)")
    if not any("VALIDATION_ERROR" in reason for reason in failures):
        return "is an environment server running there (envkit serve ENV --port PORT)?"
    from ..client import http_url

    schema = http_url(url) + "/schema"
    if action is not None:
        return f"the server refused the --action given; check it against the action schema at {schema}"
    example = _example_action(schema)
    return ('the server refused the default step action {"message": "{token}"}, which only echo-like environments '
            f"take: give this environment's action with --action{example} (its action schema: {schema})")


def _example_action(schema_url: str) -> str:
    """`, e.g. --action '{...}'` from the required fields of the server's action schema; empty if it cannot tell."""
    import httpx

    try:
        action = httpx.get(schema_url, timeout=5, trust_env=False).json()["action"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return ""
    properties = action.get("properties", {}) if isinstance(action, dict) else {}
    sample = {"integer": 0, "number": 0.0, "boolean": False, "string": "{token}"}
    example = {}
    for name in action.get("required", []) if isinstance(action, dict) else []:
        field = properties.get(name, {})
        example[name] = field["enum"][0] if field.get("enum") else sample.get(field.get("type"), "{token}")
    return f", e.g. --action '{json.dumps(example)}'" if example else ""


def _check_key(url: str) -> None:
    """Fail in one line, before any load, when the server refuses this client's key (or its absence)."""
    from ..client import EnvClient
    from ..errors import AuthenticationError, ClientError

    async def probe() -> None:
        try:
            await EnvClient(url).metadata()
        except AuthenticationError:
            raise
        except ClientError:
            pass   # an unreachable server, or one without /metadata, is reported by the run itself

    try:
        asyncio.run(probe())
    except AuthenticationError as error:
        raise click.ClickException(str(error)) from None
