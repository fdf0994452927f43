"""`envkit eval`: the results table of models and scripted policies on an environment's test tasks."""

from __future__ import annotations

import json
import logging
from typing import Any

import click

from ..evaluate import EvalSettings
from .options import api_key_option, default_of, env_options, episode_options


def _default(name: str) -> Any:
    return default_of(EvalSettings, name)



@click.command("eval")
@env_options("Its tasks and metrics are read here; without --env-url it is also served here. Repeatable.",
             "Play against a running server instead.")
@click.option("--model", "models", multiple=True, metavar="MODEL",
              help="A local folder, a Hub id, or 'tiny' (the model `envkit train` starts from); with --openai-url, "
                   "the name the chat server serves. Repeat for one row each.")
@click.option("--openai-url", default=None, metavar="URL",
              help="An OpenAI-compatible chat server's /v1 root (vllm serve, transformers serve, a hosted API); "
                   "key from OPENAI_API_KEY.")
@click.option("--policy", "policies", multiple=True, metavar="NAME",
              help="A scripted player as a baseline: random (every env: random tool calls), or one the env offers "
                   "in TOOL_PLAYERS: solver (wordle, catch, echo, coding), random-letters (wordle), oracle (a "
                   "Harbor task's solution) or nothing (a Harbor task left as it is). Repeatable.")
@click.option("--games", type=int, default=None,
              help=f"Games per environment: the first N tasks of the split (or rows of --dataset). [default: "
                   f"{_default('games')}, or all when the split has fewer]")
@click.option("--split", default=_default("split"), show_default=True, help="The environment's task split to play.")
@click.option("--dataset", default=None, type=click.Path(dir_okay=False),
              help="JSONL or CSV rows instead of a split; their columns reach reset (as in envkit train).")
@click.option("--temperature", type=float, default=_default("temperature"), show_default=True, help="0 decodes greedily.")
@episode_options("as envkit train (policies play to the end): ")
@click.option("--seed", type=int, default=_default("seed"), show_default=True,
              help="Seeds the tiny model's build and random policies.")
@click.option("--transcripts", "transcripts_path", default=None, type=click.Path(dir_okay=False),
              help="Write every game as one JSON line here (messages, tool calls, results, rewards, metrics).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON instead of a table.")
@api_key_option
@click.option("-q", "--quiet", is_flag=True, help="No progress notes on stderr.")
def command(env: tuple[str, ...], env_url: tuple[str, ...], models: tuple[str, ...], policies: tuple[str, ...],
            games: int | None, transcripts_path: str | None, as_json: bool, quiet: bool,
            chat_template_kwargs: dict[str, Any] | None, **options: Any) -> None:
    """Play models or scripted policies on an environment's test tasks and print the table.

    Games play at once, as many as the server has free sessions (turn after turn when it has fewer).

    A local model plays through the same tool-calling loop, chat template and tool schemas as in
    `envkit train`, greedily by default. Every row has episodes, success rate with a 95% (Wilson)
    interval, mean reward, mean steps, failed tool calls and sessions lost, then the environment's
    own metrics (Wordle: wins, guesses per win, invalid guesses).

    \b
    Examples:
      envkit eval --env wordle --policy solver --policy random
      envkit eval --env wordle --model tiny --model envkit-train/model \\
          --transcripts games.jsonl
      envkit eval --env wordle --openai-url http://127.0.0.1:8000/v1 \\
          --model Qwen/Qwen3-1.7B
      envkit eval --env catch --env-url http://127.0.0.1:8001 --policy solver
    """
    from ..evaluate import evaluate, render_table
    from ..play.schema import BindingError
    from ..transcripts import write_transcripts

    settings = EvalSettings(env=list(env), env_url=list(env_url), models=list(models), policies=list(policies),
                            games=games, chat_template_kwargs=chat_template_kwargs or {}, **options)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    say = (lambda message: None) if quiet else (lambda message: click.echo(message, err=True))
    try:   # other envkit errors are the command line's to report (envkit.cli.main)
        if games is None:
            settings.games = _default_games(settings)
        result = evaluate(settings, say=say)
    except BindingError as error:  # the served environment's tools cannot be bound: not a usage error
        raise click.ClickException(str(error)) from None
    if transcripts_path:
        path = write_transcripts(transcripts_path, result.transcripts)
        say(f"transcripts: {len(result.transcripts)} games in {path}")
    if as_json:
        click.echo(json.dumps({"rows": [row.to_json() for row in result.rows], "seconds": round(result.seconds, 2),
                               "transcripts": transcripts_path}, indent=2))
    else:
        click.echo(render_table(result.rows))


def _default_games(settings: Any) -> int | None:
    """30 games (the TRL guide's count), or every task when a split has fewer; a dataset is played whole."""
    if settings.dataset:
        return None
    from ..app.targets import resolve_target

    from ..evaluate.runner import ServedTasks

    sources = ([resolve_target(target).env_class for target in settings.env] if settings.env
               else [ServedTasks(url, url) for url in settings.env_url])
    sizes = [len(source.tasks(settings.split)) for source in sources if settings.split in source.splits()]
    return min([_default("games"), *sizes])
