"""Rubrics made of rubrics: `WeightedSum`, `Gate`, `Sequential`, `RubricList`, `RubricDict`."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from .base import Rubric, Score, combine

__all__ = ["WeightedSum", "Gate", "Sequential", "RubricList", "RubricDict"]


class WeightedSum(Rubric):
    """The weighted sum of its parts' scores; with `names`, the parts are children of those names."""

    def __init__(self, rubrics: Sequence[Rubric], weights: Sequence[float], names: Sequence[str] | None = None) -> None:
        super().__init__()
        if len(rubrics) != len(weights):
            raise ValueError(f"WeightedSum: {len(rubrics)} rubrics but {len(weights)} weights")
        names = list(names or (f"rubric_{index}" for index in range(len(rubrics))))
        if len(names) != len(rubrics):
            raise ValueError(f"WeightedSum: {len(rubrics)} rubrics but {len(names)} names")
        self.weights = [float(weight) for weight in weights]
        self.parts = list(rubrics)
        for name, rubric in zip(names, rubrics):
            setattr(self, name, rubric)

    def forward(self, action: Any, observation: Any) -> Score:
        return combine([rubric(action, observation) for rubric in self.parts],
                       lambda scores: sum(weight * score for weight, score in zip(self.weights, scores)))


class Gate(Rubric):
    """Its part's score where that reaches `threshold`, else 0."""

    def __init__(self, rubric: Rubric, threshold: float = 1.0) -> None:
        super().__init__()
        self.rubric = rubric
        self.threshold = threshold

    def forward(self, action: Any, observation: Any) -> Score:
        return combine([self.rubric(action, observation)],
                       lambda scores: scores[0] if scores[0] >= self.threshold else 0.0)


class Sequential(Rubric):
    """Its parts in order; 0 at the first part that scores 0 (later parts are not asked), else the last score."""

    def __init__(self, *rubrics: Rubric) -> None:
        super().__init__()
        self.parts = list(rubrics)
        for index, rubric in enumerate(rubrics):
            setattr(self, f"rubric_{index}", rubric)

    def forward(self, action: Any, observation: Any) -> Score:
        if any(inspect.iscoroutinefunction(rubric.forward) for rubric in self.parts):
            return self._forward_async(action, observation)
        score = 0.0
        for rubric in self.parts:
            score = rubric(action, observation)  # type: ignore[assignment]
            if score == 0.0:
                return 0.0
        return score

    async def _forward_async(self, action: Any, observation: Any) -> float:
        score = 0.0
        for rubric in self.parts:
            result = rubric(action, observation)
            score = await result if inspect.isawaitable(result) else result
            if score == 0.0:
                return 0.0
        return score


class RubricList(Rubric):
    """Parts kept by index for an environment to pick from; scores 0 itself (the environment calls a part)."""

    def __init__(self, rubrics: Sequence[Rubric] = ()) -> None:
        super().__init__()
        self.parts: list[Rubric] = []
        for rubric in rubrics:
            self.append(rubric)

    def append(self, rubric: Rubric) -> None:
        setattr(self, str(len(self.parts)), rubric)
        self.parts.append(rubric)

    def __getitem__(self, index: int) -> Rubric:
        return self.parts[index]

    def __len__(self) -> int:
        return len(self.parts)

    def forward(self, action: Any, observation: Any) -> float:
        return 0.0


class RubricDict(Rubric):
    """Parts kept by key (one per task type, say); scores 0 itself (the environment calls a part)."""

    def __init__(self, rubrics: Mapping[str, Rubric] | None = None) -> None:
        super().__init__()
        for key, rubric in (rubrics or {}).items():
            setattr(self, key, rubric)

    def __getitem__(self, key: str) -> Rubric:
        return self._children[key]

    def __contains__(self, key: object) -> bool:
        return key in self._children

    def forward(self, action: Any, observation: Any) -> float:
        return 0.0
