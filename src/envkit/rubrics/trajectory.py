"""Rubrics that score an episode at its end: `TrajectoryRubric` and `ExponentialDiscountingTrajectoryRubric`."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from .base import Rubric

__all__ = ["TrajectoryRubric", "ExponentialDiscountingTrajectoryRubric"]


class TrajectoryRubric(Rubric):
    """Gathers `(action, observation)` pairs; scores `intermediate_reward` until the observation is done, then
    `score_trajectory` of the whole episode. `step_rewards()` spreads the final score over the steps."""

    def __init__(self, intermediate_reward: float = 0.0) -> None:
        super().__init__()
        self.intermediate_reward = intermediate_reward
        self.trajectory: list[tuple[Any, Any]] = []

    def forward(self, action: Any, observation: Any) -> float:
        self.trajectory.append((action, observation))
        if getattr(observation, "done", False):
            return self.score_trajectory(self.trajectory)
        return self.intermediate_reward

    @abstractmethod
    def score_trajectory(self, trajectory: list[tuple[Any, Any]]) -> float:
        """The episode's score, once it is done."""

    def step_rewards(self) -> list[float]:
        """One reward per step: by default the final score on the last step, 0 before."""
        if not self.trajectory:
            return []
        return [0.0] * (len(self.trajectory) - 1) + [self.score_trajectory(self.trajectory)]

    def reset(self) -> None:
        super().reset()
        self.trajectory = []


class ExponentialDiscountingTrajectoryRubric(TrajectoryRubric):
    """A trajectory rubric whose step rewards are the final score discounted by `gamma` per step from the end."""

    def __init__(self, gamma: float = 0.99, intermediate_reward: float = 0.0) -> None:
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be between 0 and 1, got {gamma}")
        super().__init__(intermediate_reward)
        self.gamma = gamma

    def step_rewards(self) -> list[float]:
        if not self.trajectory:
            return []
        final, last = self.score_trajectory(self.trajectory), len(self.trajectory) - 1
        return [final * self.gamma ** (last - index) for index in range(len(self.trajectory))]
