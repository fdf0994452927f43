"""OpenEnv's `HarborTaskRef`: a split's tasks as the Task API lists them (`surfaces/harbor_tasks`, and the
`list_tasks` service tool of Harbor task folders).

An envkit task is the reset arguments of one episode, so `task_name` is its `task_id` argument where it has one (a
Harbor task folder's name, a coding task) and `{split}-{index}` otherwise; `task_id` is that same name where the task
has one, else the reset arguments as compact JSON, which name the task exactly; `instruction` is
`Environment.task_instruction` (cut at 4,000 characters as OpenEnv cuts it). The split `""` is the first split.
"""

from __future__ import annotations

import json
from typing import Any

from ..environment import Environment

__all__ = ["INSTRUCTION_CHARS", "split_name", "task_ref", "task_refs"]

#: Instructions longer than this are cut, with "\n…" after, as OpenEnv's Task API cuts `instruction.md`.
INSTRUCTION_CHARS = 4000


def split_name(env_class: type[Environment], split: str) -> str:
    """The split a request names: `split`, or the first split for ""."""
    splits = env_class.splits()
    return split or (splits[0] if splits else "")


def task_ref(env_class: type[Environment], split: str, index: int, task: dict[str, Any]) -> dict[str, Any]:
    """OpenEnv's `HarborTaskRef` of one task (see the module's docstring for each field)."""
    name = task.get("task_id")
    if isinstance(name, str) and name:
        task_id, task_name = name, name
    else:
        task_id = json.dumps(task, sort_keys=True, separators=(",", ":"), default=str)
        task_name = f"{split}-{index}"
    instruction = env_class.task_instruction(dict(task)).strip()
    if len(instruction) > INSTRUCTION_CHARS:
        instruction = instruction[:INSTRUCTION_CHARS] + "\n…"
    return {"index": index, "task_id": task_id, "task_name": task_name, "dataset": split, "instruction": instruction}


def task_refs(env_class: type[Environment], split: str, start: int | None = None,
              stop: int | None = None) -> list[dict[str, Any]]:
    """The `HarborTaskRef`s of `split` from `start` to `stop` (Python slice bounds); `UnknownSplitError` for a
    split the environment lacks."""
    tasks = env_class.tasks(split)
    return [task_ref(env_class, split, index, tasks[index]) for index in range(len(tasks))[start:stop]]
