"""A scripted player for echo: `envkit eval --env echo --policy solver` echoes each task's message once.

(`--policy random` needs nothing from here: envkit calls the tools with random arguments for any environment.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["TOOL_PLAYERS"]

Call = tuple[str, dict[str, Any]] | None


def _solver(seed: int) -> Callable[[Mapping[str, Any], Mapping[str, Any]], Call]:
    echoed = False

    def act(observation: Mapping[str, Any], task: Mapping[str, Any]) -> Call:
        nonlocal echoed
        if echoed:
            return None
        echoed = True
        return "echo", {"message": str(task.get("message", "hello"))}

    return act


#: Scripted players for `envkit eval --policy NAME` (see the wordle and catch packages): seed → (observation,
#: task) → the next tool call, or None to stop (echo never ends a game by itself).
TOOL_PLAYERS = {"solver": _solver}
