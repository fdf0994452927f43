"""`envkit`: the command group. Subcommands load lazily so `envkit --help` stays quick."""

from __future__ import annotations

import importlib
from typing import Any

import click

#: command name → (module under envkit.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("serve", "Serve an environment over WebSocket."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module = importlib.import_module(f"envkit.cli.{COMMANDS[name][0]}")
        return module.command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="envkit")
def cli() -> None:
    """envkit: build, serve, publish and train against environments for LLM agents.

    \b
    Example:
      envkit serve echo --port 8001 --max-concurrent-envs 64
    """


def main(argv: Any = None) -> None:
    """Console entry point."""
    cli.main(args=argv, prog_name="envkit")
