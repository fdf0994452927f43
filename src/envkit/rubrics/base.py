"""`Rubric`: a reward as a tree of named parts, each keeping its last score.

A rubric is called with the action and the observation it led to and returns a float (or, when one of
its parts asks a model, a coroutine of one). Assigning a rubric to an attribute makes it a named child,
so `named_rubrics()` walks the tree and every leaf's `last_score` is a reward component.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

__all__ = ["Rubric", "Score"]

#: What a rubric returns: a score, or a coroutine of one when a part of it awaits (an LLM judge).
Score = float | Awaitable[float]


class Rubric(ABC):
    """A reward computed from `(action, observation)`; subclasses implement `forward`.

    Attributes:
        last_score: the score of the latest call (None before the first and after `reset`).
    """

    last_score: float | None

    def __init__(self) -> None:
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "last_score", None)

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Rubric):
            self._children[name] = value
        object.__setattr__(self, name, value)

    @abstractmethod
    def forward(self, action: Any, observation: Any) -> Score:
        """The score of one step."""

    def __call__(self, action: Any, observation: Any) -> Score:
        result = self.forward(action, observation)
        if inspect.isawaitable(result):
            return self._record_async(result)
        return self._record(result)

    def _record(self, score: float) -> float:
        self.last_score = float(score)
        return self.last_score

    async def _record_async(self, pending: Awaitable[float]) -> float:
        return self._record(await pending)

    def named_children(self) -> Iterator[tuple[str, Rubric]]:
        """The direct parts, by attribute name."""
        return iter(self._children.items())

    def named_rubrics(self, prefix: str = "") -> Iterator[tuple[str, Rubric]]:
        """Every part below this one, by dotted path (`task.format`)."""
        for name, child in self._children.items():
            path = f"{prefix}.{name}" if prefix else name
            yield path, child
            yield from child.named_rubrics(path)

    def reset(self) -> None:
        """Forget the episode: last scores, and what trajectory parts gathered."""
        object.__setattr__(self, "last_score", None)
        for child in self._children.values():
            child.reset()


def combine(results: list[Score], merge: Callable[[list[float]], float]) -> Score:
    """`merge(results)`, awaiting the results that are coroutines together (so judges of one step run at once)."""
    if not any(inspect.isawaitable(result) for result in results):
        return merge(results)  # type: ignore[arg-type]

    async def settle() -> float:
        import asyncio

        values = await asyncio.gather(*(_awaited(result) for result in results))
        return merge(list(values))

    return settle()


async def _awaited(result: Score) -> float:
    return await result if inspect.isawaitable(result) else result
