"""Training rows: prompts from the environments themselves, or a user's dataset file.

Every row has a conversational `prompt`; with several environments also an `environment` column
that routes it. Every other column reaches the environment's `reset` (a `seed`, a puzzle id, ...).
TRL appends the text `reset` returns (the first observation) to the prompt's last user message.

- From the environments' tasks (`training_rows`): an environment that declares a `train` split gets
  its train tasks, whatever `--seed` says: a test task (what `envkit eval` and `--eval-games` play) is
  never a training row. One without tasks gets seeded rows (`seed`, `seed + 1`, ...). Every task
  once, or `--num-episodes` rows, interleaved across the environments. The prompt is the `prompt`
  an environment's `/metadata` gives, else one made from its description.
- From another split (`--split NAME`; `test` only with `--train-on-test`), or an Open Reward Standard
  server's: each task's `reset` arguments as columns (for an ORS server, the task's `task_index`).
- From a file (`--dataset rows.jsonl` or `.csv`): one row per line. A `prompt` column (text or a
  list of chat messages) is optional; rows without one get the environment's prompt.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..client.ors_client import OrsServer
from ..errors import ConfigurationError, EnvkitError
from ..transcripts import json_objects

__all__ = ["TRAIN_SPLIT", "TEST_SPLIT", "task_prompt", "env_rows", "task_rows", "training_rows", "server_tasks",
           "train_tasks", "file_rows"]

#: The split `envkit train` trains on by default, and the one `envkit eval` and `--eval-games` play.
TRAIN_SPLIT, TEST_SPLIT = "train", "test"


def task_prompt(name: str, metadata: Mapping[str, Any]) -> str:
    """What the model is asked to do in environment `name`, before the first observation."""
    given = metadata.get("prompt")
    if isinstance(given, str) and given.strip():
        return given.rstrip() + "\n\n"
    description = str(metadata.get("description") or f"The {name} environment.").strip()
    return f"{description}\nAct by calling the tools.\n\n"


def env_rows(prompts: Mapping[str, str], num_episodes: int, seed: int) -> list[dict[str, Any]]:
    """`num_episodes` rows spread round-robin over the environments, seeds `seed`, `seed + 1`, ..."""
    names = list(prompts)
    rows = []
    for index in range(num_episodes):
        name = names[index % len(names)]
        row: dict[str, Any] = {"prompt": [{"role": "user", "content": prompts[name]}], "seed": seed + index}
        if len(names) > 1:
            row["environment"] = name
        rows.append(row)
    return rows


def task_rows(prompts: Mapping[str, str], tasks: Mapping[str, Sequence[dict[str, Any]]],
              num_episodes: int | None) -> list[dict[str, Any]]:
    """Rows from each environment's list of `reset` arguments, round-robin across the environments.

    Every entry once (`num_episodes` None), or `num_episodes` rows, each environment cycling through its list.
    """
    names = [name for name in prompts if tasks.get(name)]
    if not names:
        raise ConfigurationError("the environments have no tasks in this split, so there is nothing to train on")
    picked: list[tuple[str, dict[str, Any]]] = []
    if num_episodes is None:
        for index in range(max(len(tasks[name]) for name in names)):
            picked.extend((name, tasks[name][index]) for name in names if index < len(tasks[name]))
    else:
        for index in range(num_episodes):
            name = names[index % len(names)]
            listed = tasks[name]
            picked.append((name, listed[(index // len(names)) % len(listed)]))
    rows = []
    for name, arguments in picked:
        row: dict[str, Any] = {**arguments, "prompt": [{"role": "user", "content": prompts[name]}]}
        if len(prompts) > 1:
            row["environment"] = name
        rows.append(row)
    return rows


def training_rows(prompts: Mapping[str, str], tasks: Mapping[str, Sequence[dict[str, Any]] | None],
                  num_episodes: int | None, seed: int, seeded: int) -> list[dict[str, Any]]:
    """Rows from each environment's tasks, or, for an environment whose tasks are None, seeded rows.

    With no tasks at all: `num_episodes` (else `seeded`) seeded rows (`env_rows`). Otherwise every task once
    (`num_episodes` None) or `num_episodes` rows, as `task_rows` makes them; an environment without tasks
    then takes part with `num_episodes` (else `seeded`) seeds.
    """
    if all(tasks.get(name) is None for name in prompts):
        return env_rows(prompts, num_episodes or seeded, seed)
    seeds = [{"seed": seed + index} for index in range(num_episodes or seeded)]
    listed = {name: seeds if tasks.get(name) is None else tasks[name] for name in prompts}
    return task_rows(prompts, listed, num_episodes)


def server_tasks(name: str, url: str, split: str) -> list[dict[str, Any]]:
    """The tasks of `split` from an envkit server's task catalogue (its Open Reward Standard routes)."""
    try:
        server = OrsServer(url)
        try:
            if split not in server.splits():
                raise ConfigurationError(f"--split {split}: {name} has no such split; its splits: "
                                         f"{', '.join(server.splits()) or 'none'}")
            return server.tasks(split)
        finally:
            server.close()
    except (EnvkitError, KeyError) as error:
        if isinstance(error, ConfigurationError):
            raise
        raise ConfigurationError(f"--split {split}: cannot read {name}'s tasks at {url} ({error}); is it an "
                                 "envkit server?") from None


def train_tasks(url: str) -> list[dict[str, Any]] | None:
    """The `train` tasks of the server at `url`; None when it declares no `train` split, or has no task
    catalogue (an OpenEnv server): its episodes are then seeded."""
    try:
        server = OrsServer(url, timeout=10.0)
    except EnvkitError:
        return None
    try:
        return server.tasks(TRAIN_SPLIT) if TRAIN_SPLIT in server.splits() else None
    except (EnvkitError, KeyError):
        return None
    finally:
        server.close()


def file_rows(path: str | Path, prompts: Mapping[str, str]) -> list[dict[str, Any]]:
    """Rows from a JSON Lines or CSV file, checked and completed (prompt, environment)."""
    path = Path(path)
    records = _read(path)
    if not records:
        raise ConfigurationError(f"--dataset {path}: no rows; add one JSON object per line (or CSV rows)")
    names = list(prompts)
    rows = []
    for number, record in enumerate(records, start=1):
        where = f"--dataset {path}, row {number}"
        row = {key: value for key, value in record.items() if value is not None and value != ""}
        name = row.get("environment")
        if name is None:
            if len(names) > 1:
                raise ConfigurationError(f"{where}: no `environment` column; with several environments each row "
                                         f"names one of {', '.join(names)}")
            name = names[0]
        elif name not in prompts:
            raise ConfigurationError(f"{where}: environment {name!r} is not in this run ({', '.join(names)})")
        if len(names) > 1:
            row["environment"] = name
        else:
            row.pop("environment", None)
        row["prompt"] = _prompt(row.get("prompt"), prompts[name], where)
        rows.append(row)
    return rows


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise ConfigurationError(f"--dataset {path}: no such file")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        return [record for _, record in json_objects(path.read_text().splitlines(), f"--dataset {path}",
                                                     ConfigurationError)]
    if suffix == ".csv":
        with path.open(newline="") as handle:
            return [{key: _scalar(value) for key, value in record.items()} for record in csv.DictReader(handle)]
    raise ConfigurationError(f"--dataset {path}: use a .jsonl (one JSON object per line) or .csv file")


def _scalar(text: str | None) -> Any:
    """CSV cells are text; numbers and booleans become numbers and booleans (seeds, ids)."""
    if text is None:
        return None
    stripped = text.strip()
    if stripped.lower() in ("true", "false"):
        return stripped.lower() == "true"
    if re.fullmatch(r"[+-]?\d+", stripped):
        return int(stripped)
    if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", stripped):
        return float(stripped)
    return text


def _prompt(value: Any, default: str, where: str) -> list[dict[str, Any]]:
    if value is None:
        return [{"role": "user", "content": default}]
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, Sequence) and value and all(isinstance(m, dict) and "role" in m and "content" in m
                                                     for m in value):
        if value[-1]["role"] != "user":
            raise ConfigurationError(f"{where}: the prompt's last message must be the user's (the first observation "
                                     "is appended to it)")
        return [dict(message) for message in value]
    raise ConfigurationError(f"{where}: `prompt` must be text or a list of {{\"role\", \"content\"}} messages")
