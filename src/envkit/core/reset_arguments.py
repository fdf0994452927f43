"""What a `reset` request may carry: the names the environment takes, and reset's own fields typed.

Every surface (`/ws` reset frames, the MCP `reset` tool, ORS tasks, `/web`) starts an episode through
`ResetArguments.check`, so each refuses the same requests with the same words:

- `seed` must be an integer and `episode_id` a string (or either left out or null);
- a name `reset` does not take is refused, with the names it does take. A `reset(..., **kwargs)`
  takes the names its tasks use (`TASKS`: each task is one reset's arguments); one with `**kwargs` and
  no tasks takes any name, on purpose.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Callable

from ..environment import Environment
from ..protocol import ErrorCode, FrameError

__all__ = ["ResetArguments", "reset_method"]


def reset_method(env_class: type[Environment]) -> Callable[..., Any]:
    """The method that serves resets: `reset_async` when the class overrides it, else `reset`."""
    return env_class.reset_async if env_class.reset_async is not Environment.reset_async else env_class.reset


class ResetArguments:
    """The keyword arguments an environment class's `reset` accepts, checked once per request."""

    def __init__(self, env_class: type[Environment]) -> None:
        self.owner = env_class.__qualname__
        parameters = list(inspect.signature(reset_method(env_class)).parameters.values())
        #: The bound first parameter (`self`), which no keyword can reach.
        self.bound = parameters[0].name if parameters and parameters[0].kind is not parameters[0].POSITIONAL_ONLY else ""
        named = {param.name for param in parameters[1:]
                 if param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)}
        #: Every name reset accepts; None: any name but the bound one.
        self.names: frozenset[str] | None = frozenset(named)
        if any(param.kind is param.VAR_KEYWORD for param in parameters[1:]):
            task_names = _task_names(env_class)
            self.names = None if task_names is None else frozenset(named | task_names)

    def check(self, data: Any) -> dict[str, Any]:
        """`data` as reset's keyword arguments; raises `FrameError` (`VALIDATION_ERROR`) saying what is wrong."""
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise FrameError(ErrorCode.VALIDATION_ERROR, 'Invalid reset: "data" must be a JSON object of keyword arguments')
        unknown = sorted(name for name in data if name == self.bound or self.names is not None and name not in self.names)
        if unknown:
            raise FrameError(ErrorCode.VALIDATION_ERROR, self._unknown_message(unknown))
        seed, episode_id = data.get("seed"), data.get("episode_id")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise FrameError(ErrorCode.VALIDATION_ERROR, f"Invalid reset: seed must be an integer or null, got {seed!r}")
        if episode_id is not None and not isinstance(episode_id, str):
            raise FrameError(ErrorCode.VALIDATION_ERROR,
                             f"Invalid reset: episode_id must be a string or null, got {episode_id!r}")
        return data

    def _unknown_message(self, unknown: list[str]) -> str:
        takes = sorted(self.names or ())
        close = [match for name in unknown for match in difflib.get_close_matches(name, takes, n=1)]
        hint = f" (did you mean {', '.join(repr(name) for name in close)}?)" if close else ""
        listed = ", ".join(takes) or "no arguments"
        if self.names is None:
            listed = f"any name but {self.bound}"
        return (f"Invalid reset: {self.owner}.reset() takes no argument {', '.join(repr(name) for name in unknown)}"
                f"{hint}; it takes {listed}")


def _task_names(env_class: type[Environment]) -> frozenset[str] | None:
    """The names the environment's tasks pass to reset, with seed and episode_id; None when it has no tasks."""
    try:
        tasks = [task for split in env_class.splits() for task in env_class.tasks(split)]
    except Exception:  # a tasks() that raises is validate's to report; here it only means nothing is known
        return None
    if not tasks:
        return None
    return frozenset({"seed", "episode_id"}.union(*(task for task in tasks if isinstance(task, dict))))
