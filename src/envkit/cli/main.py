"""`envkit`: the command group. Subcommands load lazily so `envkit --help` stays quick."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from ..errors import ConfigurationError, EnvkitError, ToolDefinitionError

#: command name → (module under envkit.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("serve", "Serve an environment over WebSocket."),
    "train": ("train", "Train a model with TRL GRPO against served environments (tools bound automatically)."),
    "eval": ("eval", "Play models or scripted policies on an environment's test tasks; print the results table."),
    "validate": ("validate", "Check an env folder, a module:Class or a running server."),
    "new": ("new", "Create a new env folder from the template."),
    "push": ("push", "Publish an env folder as a Hugging Face Space."),
    "containers": ("containers", "List the containers from_docker_image started; remove those whose client is gone."),
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
    """Console entry point: every command's errors are one line on stderr, `envkit COMMAND: error: ...`;
    exit 2 for usage errors (a bad flag, target or setting), 1 for failures."""
    if argv is None:   # the process's own command line, so it can be run again as it was
        from ..core.memory import rerun_on_system_allocator

        rerun_on_system_allocator(sys.argv[1:])
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:   # bare `envkit`: the help, as `envkit --help` prints it, with usage's exit code
        click.echo(cli.get_help(click.Context(cli, info_name="envkit", **cli.context_settings)))
        sys.exit(2)
    try:
        cli.main(args=args, prog_name="envkit", standalone_mode=False)
    except click.UsageError as error:
        command = error.ctx.command_path if error.ctx is not None else _command_path(args)
        _fail(command, f"{error.format_message()} (see '{command} --help')", 2)
    except click.ClickException as error:
        _fail(_command_path(args), error.format_message(), error.exit_code)
    except (ConfigurationError, ToolDefinitionError) as error:   # a bad target, setting or environment definition
        _fail(_command_path(args), str(error), 2)
    except EnvkitError as error:          # a server unreachable, full or refusing; a session lost
        _fail(_command_path(args), str(error), 1)
    except click.Abort:
        click.echo(f"{_command_path(args)}: aborted", err=True)
        sys.exit(1)


def _command_path(args: list[str]) -> str:
    """`envkit COMMAND` for the command `args` ran (plain `envkit` before one is named)."""
    command = next((arg for arg in args if not arg.startswith("-")), None)
    return f"envkit {command}" if command in COMMANDS else "envkit"


def _fail(command: str, message: str, code: int) -> None:
    click.echo(f"{command}: error: {message}", err=True)
    sys.exit(code)
