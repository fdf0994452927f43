"""Options several commands share: `--api-key-env`, `--env`/`--env-url`, an episode's budget and chat template, and
help texts that take their defaults and the bundled environments' names from the code."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable

import click

from ..protocol import API_KEY_ENV

__all__ = ["CommandNamingBundled", "api_key_option", "env_options", "episode_options", "json_mapping", "default_of",
           "bundled_names",
           "by_model", "by_game"]

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def bundled_names() -> str:
    """The bundled environments' names, comma-separated, as help texts list them."""
    from ..app.targets import bundled_envs

    return ", ".join(bundled_envs())


def default_of(settings_class: type, name: str) -> Any:
    """The default of field `name` of a dataclass (for help texts)."""
    field = next(field for field in dataclasses.fields(settings_class) if field.name == name)
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default


class _NamesBundled(click.Option):
    """An option whose help text names the bundled environments (`{bundled}`), looked up only when help is shown."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        template = self.help or ""
        self.help = template.replace("{bundled}", bundled_names())
        try:
            return super().get_help_record(ctx)
        finally:
            self.help = template


class CommandNamingBundled(click.Command):
    """A command whose help text names the bundled environments (`{bundled}`), looked up only when help is shown."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        template = self.help or ""
        self.help = template.replace("{bundled}", bundled_names())
        try:
            super().format_help_text(ctx, formatter)
        finally:
            self.help = template


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
    """The `--api-key-env NAME` option of the commands that connect to a server: the key is read from `$NAME`."""
    return click.option(
        "--api-key-env", metavar="NAME", default=API_KEY_ENV, show_default=True, expose_value=False,
        is_eager=True, callback=_use_key_from,
        help="Environment variable holding the server's API key (sent as X-API-Key; none if it is unset).",
    )(command)


def json_mapping(ctx: click.Context, param: click.Parameter, value: str | None) -> dict[str, Any] | None:
    """A click callback: the option's value as a JSON object."""
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as error:
        raise click.BadParameter(f"not JSON ({error.msg}); e.g. '{{\"enable_thinking\": false}}'") from None
    if not isinstance(parsed, dict):
        raise click.BadParameter("expected a JSON object, e.g. '{\"enable_thinking\": false}'")
    return parsed


def _stacked(options: list[Decorator]) -> Decorator:
    def add(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command
    return add


def env_options(env_help: str, url_help: str) -> Decorator:
    """`--env NAME` (repeatable; `env_help` follows the list of what a name may be) and `--env-url URL`."""
    return _stacked([
        click.option("--env", "env", multiple=True, metavar="NAME", cls=_NamesBundled,
                     help=f"A bundled env ({{bundled}}), an env folder or module:Class. {env_help}"),
        click.option("--env-url", "env_url", multiple=True, metavar="URL",
                     help=f"{url_help} Repeatable; pairs with --env names in order. One environment on several "
                          "servers: separate their URLs with commas or give a registry (http://HEAD:PORT/replicas); "
                          "each episode opens on the least-loaded server."),
    ])


def _shown(value: Any) -> str:
    """A default as help shows it: small rates as `2e-4`, not `0.0002`."""
    if isinstance(value, float) and 0 < value < 0.01:
        mantissa, exponent = f"{value:e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return str(value)


def by_model(name: str) -> str:
    """The default of a setting that depends on the model, in words: `16 for tiny, 8 for others`."""
    from ..play.models import model_defaults

    return f"{_shown(model_defaults(True)[name])} for tiny, {_shown(model_defaults(False)[name])} for others"


def by_game(name: str) -> str:
    """The default of a setting that depends on the model and on whether episodes have a set length, in words."""
    from ..play.models import model_defaults

    return (f"tiny: {_shown(model_defaults(True, 1)[name])} on games with an episode length, else "
            f"{_shown(model_defaults(True)[name])}; others: {_shown(model_defaults(False)[name])}")


def episode_options(default_note: str = "") -> Decorator:
    """An episode's budget (`--max-completion-length`, `--max-tool-calling-iterations`) and chat template
    (`--enable-thinking`, `--chat-template-kwargs`), as `envkit train` and `envkit eval` share them."""
    return _stacked([
        click.option("--max-completion-length", type=int, default=None,
                     help="Token budget of a whole episode, tool results included. "
                          f"[default: {default_note}fitted to the environment's episode length; else "
                          f"{by_model('max_completion_length')}]"),
        click.option("--max-tool-calling-iterations", type=int, default=None,
                     help="Model turns that call tools, per episode, at most. [default: "
                          f"{default_note}the environment's episode length + 2; else "
                          f"{by_model('max_tool_calling_iterations')}]"),
        click.option("--enable-thinking/--disable-thinking", default=None,
                     help="Chat template's enable_thinking (Qwen3 and similar). [default: the template's; off for "
                          "tiny]"),
        click.option("--chat-template-kwargs", callback=json_mapping, default=None, metavar="JSON",
                     help="Extra chat template arguments, as a JSON object."),
    ])
