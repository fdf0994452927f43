"""Scoring an observation with a rubric: its reward, and the rubric's components written beside it."""

from __future__ import annotations

import inspect
from typing import Any

from .components import components, step_rewards
from .judge import judge_usage

__all__ = ["score", "score_async", "report_components"]


def report_components(observation: Any, rubric: Any) -> None:
    """Write `rubric`'s components into `observation`: its `reward_components` field where the model has one,
    else `metadata["reward_components"]`; at the episode's end also each trajectory part's per-step rewards
    (`metadata["step_rewards"]`) and the judges' usage (`metadata["judge_usage"]`)."""
    found = components(rubric)
    extra: dict[str, Any] = {}
    if "reward_components" in type(observation).model_fields:
        observation.reward_components = {**observation.reward_components, **found}
    else:
        extra["reward_components"] = found
    if getattr(observation, "done", False):
        spread = step_rewards(rubric)
        if spread:
            extra["step_rewards"] = spread
    usage = judge_usage(rubric)
    if usage:
        extra["judge_usage"] = usage
    if extra:
        observation.metadata = {**observation.metadata, **extra}


def score(rubric: Any, action: Any, observation: Any) -> Any:
    """Set `observation.reward` to `rubric(action, observation)` and report its components; returns the observation.
    A rubric with an LLM judge in it needs `score_async`."""
    result = rubric(action, observation)
    if inspect.isawaitable(result):
        raise TypeError("this rubric awaits (an LLM judge is in it): call score_async from step_async")
    observation.reward = result
    report_components(observation, rubric)
    return observation


async def score_async(rubric: Any, action: Any, observation: Any) -> Any:
    """`score`, awaiting rubrics that ask a model."""
    result = rubric(action, observation)
    observation.reward = await result if inspect.isawaitable(result) else result
    report_components(observation, rubric)
    return observation
