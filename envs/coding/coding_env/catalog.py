"""Both splits' problems by task id: HumanEval's (`test`) and envkit's own (`train`)."""

from __future__ import annotations

from .problems import Problem, humaneval_problems
from .train_problems import train_problems

__all__ = ["problem"]


def problem(task_id: str) -> Problem:
    """The problem named `task_id` from either split; `KeyError` when there is none."""
    if task_id.startswith("HumanEval/"):
        return humaneval_problems()[task_id]
    return train_problems()[task_id]
