"""`--api-key-env NAME`, shared by the commands that connect to a server (validate, bench, train)."""

from __future__ import annotations

import os
from typing import Any, Callable

import click

from ..protocol import API_KEY_ENV


def _use_key_from(ctx: click.Context, param: click.Parameter, name: str) -> str:
    """Make the key in `$NAME` the one every client of this command sends (they read `$ENVKIT_API_KEY`)."""
    if name != API_KEY_ENV:
        key = os.environ.get(name, "").strip()
        if not key:
            raise click.BadParameter(f"the environment variable {name} is not set or empty; export the key there "
                                     "first", param_hint="--api-key-env")
        os.environ[API_KEY_ENV] = key
    return name


def api_key_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """The `--api-key-env NAME` option: the server's API key is read from that environment variable."""
    return click.option(
        "--api-key-env", metavar="NAME", default=API_KEY_ENV, show_default=True, expose_value=False,
        is_eager=True, callback=_use_key_from,
        help="Environment variable holding the server's API key (sent as X-API-Key; none if it is unset).",
    )(command)
