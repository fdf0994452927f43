"""Which games an evaluation plays: tasks of an environment's split, or rows of a dataset file.

A game's prompt is built as `envkit train` builds its rows' prompts (the environment's `/metadata`
prompt or description, `envkit.train.data.task_prompt`), followed by the task's own instruction when
the environment gives one (`Environment.task_prompt`). The first observation is appended to it when
the game starts, as TRL does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..environment import Environment, UnknownSplitError
from ..errors import ConfigurationError
from ..train.data import file_rows
from .loop import Game

__all__ = ["split_games", "dataset_games", "game_prompt"]

NOT_TASK = ("prompt", "environment")


def game_prompt(base: str, env_class: type[Environment] | None, task: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chat a game starts from: the environment's prompt, then the task's instruction if it has one."""
    instruction = env_class.task_prompt(dict(task)) if env_class is not None else None
    content = base + (instruction.rstrip() + "\n\n" if instruction else "")
    return [{"role": "user", "content": content}]


def split_games(env: str, env_class: type[Environment] | None, split: str, games: int | None,
                base_prompt: str) -> list[Game]:
    """The first `games` tasks of `split` (all of them when None); raises `ConfigurationError` saying what exists."""
    if env_class is None:
        raise ConfigurationError(f"{env}: the tasks of a split come from the environment's class; name it with --env "
                                 "(a bundled env, an env folder or module:Class) beside --env-url, or give --dataset")
    try:
        tasks = env_class.tasks(split)
    except UnknownSplitError:
        known = ", ".join(env_class.splits()) or (f'none: declare {env_class.__name__}.TASKS = {{"test": [...]}} (each '
                                                  "task the keyword arguments of one reset), or give --dataset "
                                                  "rows.jsonl")
        raise ConfigurationError(f"{env} has no split {split!r}; its splits: {known}") from None
    if not tasks:
        raise ConfigurationError(f"{env} split {split!r} has no tasks; choose another --split or give --dataset")
    count = len(tasks) if games is None else games
    if count > len(tasks):
        raise ConfigurationError(f"--games {count}: {env} split {split!r} has only {len(tasks)} tasks; ask for "
                                 f"{len(tasks)} or fewer, or give --dataset")
    return [Game(env, dict(tasks[index]), game_prompt(base_prompt, env_class, tasks[index]), split, index)
            for index in range(count)]


def dataset_games(path: str, base_prompts: Mapping[str, str], games: int | None) -> list[Game]:
    """Games from a JSONL or CSV file, one per row: its columns but `prompt` and `environment` reach `reset`; a row
    without a prompt gets the environment's (as in `envkit train --dataset`)."""
    rows = file_rows(path, base_prompts)
    if games is not None:
        if games > len(rows):
            raise ConfigurationError(f"--games {games}: --dataset {path} has only {len(rows)} rows")
        rows = rows[:games]
    names = list(base_prompts)
    chosen = []
    for row in rows:
        env = row.get("environment", names[0])
        task = {key: value for key, value in row.items() if key not in NOT_TASK}
        chosen.append(Game(env, task, row["prompt"]))
    return chosen
