"""A rubric tree read as reward components: each named leaf's last score, under an identifier.

These functions read envkit's rubrics and OpenEnv's (`openenv.core.rubrics`) alike: both offer
`named_rubrics()`, `named_children()` and `last_score`, and a trajectory part's per-step rewards
(`step_rewards()` here, `compute_step_rewards()` in OpenEnv).
"""

from __future__ import annotations

import re
from typing import Any

from ..episode_metrics import Metric

__all__ = ["component_names", "components", "rubric_metrics", "step_rewards", "ROOT_COMPONENT"]

#: The component of a rubric that has no named parts: the rubric itself.
ROOT_COMPONENT = "rubric"


def _leaves(rubric: Any) -> list[tuple[str, Any]]:
    leaves = [(path, part) for path, part in rubric.named_rubrics() if next(iter(part.named_children()), None) is None]
    return leaves or [(ROOT_COMPONENT, rubric)]


def _identifier(path: str) -> str:
    name = re.sub(r"\W", "_", path)
    return name if name.isidentifier() else f"part_{name}"


def component_names(rubric: Any) -> list[str]:
    """The component names of `rubric`'s named leaves (`task.format` becomes `task_format`)."""
    return [_identifier(path) for path, _ in _leaves(rubric)]


def components(rubric: Any) -> dict[str, float]:
    """Each named leaf's last score; leaves not scored this episode are left out."""
    return {_identifier(path): float(part.last_score) for path, part in _leaves(rubric)
            if getattr(part, "last_score", None) is not None}


def step_rewards(rubric: Any) -> dict[str, list[float]]:
    """The per-step rewards of every trajectory part (discounting applied), by component name."""
    found: dict[str, list[float]] = {}
    for path, part in [(ROOT_COMPONENT, rubric), *rubric.named_rubrics()]:
        spread = getattr(part, "step_rewards", None) or getattr(part, "compute_step_rewards", None)
        if callable(spread) and hasattr(part, "trajectory"):
            found[_identifier(path)] = [float(value) for value in spread()]
    return found


def rubric_metrics(rubric: Any) -> tuple[Metric, ...]:
    """An evaluation column (`Metric`, mean over episodes) per named leaf."""
    return tuple(Metric(name, name.replace("_", " "), "mean", description="a rubric component: its last score")
                 for name in component_names(rubric))
