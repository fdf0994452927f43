"""Scripted players for `envkit eval --policy solver|random` and the tiny model's warm-up.

A player is made per game from a seed and answers each observation with the next tool call,
`(tool, arguments)`, reading the task (`{"task_id": ...}`) it plays:

- `solver` writes the task's reference solution (HumanEval's canonical solution for the test split),
  runs the examples and submits.
- `random` makes a few random tool calls, then submits the prompt's function returning a random
  constant: what an agent that ignores the task scores.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from .grading import SOLUTION
from .catalog import problem

__all__ = ["TOOL_PLAYERS", "solver", "random_player", "stub_solution"]

Call = tuple[str, dict[str, Any]]
Act = Callable[[Mapping[str, Any], Mapping[str, Any]], Call]

#: What the random player's function returns.
CONSTANTS = ("None", "0", "1", "-1", "True", "False", "''", "'a'", "[]", "[0]", "{}", "0.5")
#: Commands and code the random player runs before it submits.
COMMANDS = ("ls", "cat solution.py", "python3 solution.py", "echo hello", "pwd", "python3 --version")
SNIPPETS = ("print(1 + 1)", "import solution", "print(sorted([3, 1, 2]))", "print('hello')")


def stub_solution(prompt: str, constant: str) -> str:
    """The prompt's function with a body that returns `constant`."""
    return prompt.rstrip("\n") + f"\n    return {constant}\n"


def solver(seed: int) -> Act:
    """Writes the reference solution, runs the examples, submits; it reads where it is from the last output, so
    moves made in between (the tiny model's warm-up makes random ones) do not lead it astray."""
    def act(observation: Mapping[str, Any], task: Mapping[str, Any]) -> Call:
        output = str(observation.get("output", ""))
        if output.startswith("wrote ") and output.split("\n")[0].endswith(f" to {SOLUTION}"):
            return "run_examples", {}
        if " examples pass" in output.split("\n")[0] or "has no >>> examples" in output:
            return "submit", {}
        return "write_file", {"path": SOLUTION, "content": problem(_task_id(observation, task)).reference}

    return act


def _task_id(observation: Mapping[str, Any], task: Mapping[str, Any]) -> str:
    """The task being played: every observation names it (a task drawn by seed has no task_id in the task)."""
    return str(observation.get("task_id") or task["task_id"])


def random_player(seed: int) -> Act:
    """Up to three random runs, then a function returning a random constant, then submit."""
    rng = random.Random(seed)
    moves = ["explore"] * rng.randint(0, 3) + ["write", "submit"]

    def act(observation: Mapping[str, Any], task: Mapping[str, Any]) -> Call:
        move = moves.pop(0) if moves else "submit"
        if move == "write":
            prompt = problem(_task_id(observation, task)).prompt
            return "write_file", {"path": SOLUTION, "content": stub_solution(prompt, rng.choice(CONSTANTS))}
        if move == "submit":
            return "submit", {}
        tool = rng.choice(("run_command", "run_python", "run_examples"))
        if tool == "run_command":
            return tool, {"command": rng.choice(COMMANDS)}
        return (tool, {"code": rng.choice(SNIPPETS)}) if tool == "run_python" else (tool, {})

    return act


#: `envkit eval --policy NAME`: factories from a seed to a function from (observation, task) to the next tool call.
TOOL_PLAYERS = {"solver": solver, "random": random_player}
