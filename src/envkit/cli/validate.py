"""`envkit validate PATH|URL`: check an env folder or a running server, as a table or JSON."""

from __future__ import annotations

import json
import sys

import click

from .options import api_key_option


@click.command("validate")
@click.argument("target")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of a table.")
@api_key_option
def command(target: str, as_json: bool) -> None:
    """Check TARGET: an env folder, a bundled env name, module:Class, or the URL of a running server.

    A folder: the Space files, README front matter, [tool.envkit] manifest, that the environment
    and its server app import, that every tool argument is typed and described, its task splits,
    and the Dockerfile's shape (non-root, HEALTHCHECK, installs the staged envkit wheel, envkit
    serve). module:Class: the import, tools, task splits and limits (a module in the working folder
    imports, as for uvicorn).

    A URL: /health, /schema, /tools, a reset and a step, a tool call, two sessions at once, and the
    Open Reward Standard routes (catalogue, tools, a session with a tool call, delete, refusals). A
    server that speaks only the Open Reward Standard (an openreward-SDK server) gets the ORS checks.

    Exit status 1 when a check fails.

    \b
    Examples:
      envkit validate ./my_env
      envkit validate my_module:GuessEnvironment
      envkit validate http://127.0.0.1:8000 --json
      envkit validate https://you-my-env.hf.space --api-key-env MY_ENV_KEY
    """
    from ..publish.validate import validate

    report = validate(target)   # a key refused, a name that is no env: one line (envkit.cli.main)
    click.echo(json.dumps(report.as_dict(), indent=2) if as_json else report.table())
    sys.exit(0 if report.ok else 1)
