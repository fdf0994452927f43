"""`envkit`: the command group. Subcommands load lazily so `envkit --help` stays quick."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

#: command name → (module under envkit.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("serve", "Serve an environment over WebSocket."),
    "train": ("train", "Train a model with TRL GRPO against served environments (tools bound automatically)."),
    "eval": ("eval", "Play models or scripted policies on an environment's test tasks; print the results table."),
    "validate": ("validate", "Check an env folder or a running server."),
    "new": ("new", "Create a new env folder from the template."),
    "push": ("push", "Publish an env folder as a Hugging Face Space."),
    "bench": ("bench", "Load a running server with concurrent sessions and report steps/s, latency, failures."),
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
    """Console entry point: errors are one line on stderr; exit 2 for usage errors, 1 for failures."""
    if argv is None:   # the process's own command line, so it can be run again as it was
        from ..memory import rerun_on_system_allocator

        rerun_on_system_allocator(sys.argv[1:])
    try:
        cli.main(args=argv, prog_name="envkit", standalone_mode=False)
    except click.UsageError as error:
        command = error.ctx.command_path if error.ctx is not None else "envkit"
        click.echo(f"{command}: error: {error.format_message()} (see '{command} --help')", err=True)
        sys.exit(2)
    except click.ClickException as error:
        click.echo(f"envkit: error: {error.format_message()}", err=True)
        sys.exit(error.exit_code)
    except click.Abort:
        click.echo("envkit: aborted", err=True)
        sys.exit(1)
