"""Scripted players for {{cookiecutter.title}}: `envkit eval --env . --policy solver --policy random` plays them as
baselines, and `envkit train` warms its tiny model up on games the solver plays.

Each entry of `TOOL_PLAYERS` takes a seed and returns a function from the latest observation (the wire dict:
`message`, `guesses_left`) and the task to the next tool call, `(tool, arguments)`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from .models import HIGH, LOW

Act = Callable[[Mapping[str, Any], Mapping[str, Any]], tuple[str, dict[str, Any]]]


def binary_search(seed: int) -> Act:
    """Guesses the middle of the numbers still possible: finds any secret in at most 7 guesses."""
    bounds = [LOW, HIGH]

    def act(observation: Mapping[str, Any], task: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        message = str(observation.get("message", ""))
        if "is wrong" in message:
            last = int(message.split()[0])
            bounds[:] = [last + 1, bounds[1]] if "higher" in message else [bounds[0], last - 1]
        return "guess", {"number": (bounds[0] + bounds[1]) // 2}

    return act


def random_guesses(seed: int) -> Act:
    """Guesses a random number in range each turn (a baseline)."""
    rng = random.Random(seed)

    def act(observation: Mapping[str, Any], task: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        return "guess", {"number": rng.randint(LOW, HIGH)}

    return act


TOOL_PLAYERS = {"solver": binary_search, "random": random_guesses}
