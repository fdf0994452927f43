"""The results table: one row per model and environment, the figures every environment gets plus its own metrics.

Every row: episodes, success rate with a 95% Wilson interval, mean reward, mean steps (tool calls
per episode), failed tool calls (refused or raised: what TRL counts as tool failures), sessions lost.
Then the environment's metrics (`Environment.METRICS`, aggregated by `envkit.episode_metrics.summarise`).
An episode succeeds when the environment's success metric holds; an environment without one
counts a positive episode reward as success.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..episode_metrics import Metric, summarise
from .loop import Conversation

__all__ = ["Row", "wilson_interval", "row_for", "render_table"]


def wilson_interval(successes: int, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% by default); (0, 1) for no trials."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Row:
    """One model on one environment."""

    model: str
    env: str
    episodes: int
    successes: int
    success_rate: float
    success_interval: tuple[float, float]
    mean_reward: float | None
    mean_steps: float | None
    failed_tool_calls: int
    sessions_lost: int
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "env": self.env, "episodes": self.episodes, "successes": self.successes,
                "success_rate": self.success_rate, "success_interval_95": list(self.success_interval),
                "mean_reward": self.mean_reward, "mean_steps": self.mean_steps,
                "failed_tool_calls": self.failed_tool_calls, "sessions_lost": self.sessions_lost,
                "metrics": self.metrics}


def _succeeded(conversation: Conversation, success: Metric | None) -> bool:
    episode = conversation.episode
    if episode.lost:
        return False
    if success is not None:
        return bool(episode.metrics.get(success.name))
    return episode.reward > 0


def row_for(model: str, env: str, conversations: Sequence[Conversation], metrics: Sequence[Metric]) -> Row:
    """Aggregate one model's games on one environment."""
    episodes = [conversation.episode for conversation in conversations]
    success = next((metric for metric in metrics if metric.success), None)
    successes = sum(_succeeded(conversation, success) for conversation in conversations)
    n = len(conversations)
    values = [episode.metrics for episode in episodes]
    summaries = {metric.name: summarise(metric, values) for metric in metrics}
    return Row(
        model=model, env=env, episodes=n, successes=successes, success_rate=successes / n if n else 0.0,
        success_interval=wilson_interval(successes, n),
        mean_reward=sum(episode.reward for episode in episodes) / n if n else None,
        mean_steps=sum(len(episode.turns) for episode in episodes) / n if n else None,
        failed_tool_calls=sum(conversation.failed_calls for conversation in conversations),
        sessions_lost=sum(1 for episode in episodes if episode.lost),
        metrics={name: {"title": summary.metric.title, "aggregate": summary.metric.aggregate, "value": summary.value,
                        "episodes": summary.episodes, "text": summary.text()} for name, summary in summaries.items()})


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_table(rows: Sequence[Row]) -> str:
    """The rows as aligned text, one block per environment (each with its own metric columns)."""
    blocks = []
    for env in dict.fromkeys(row.env for row in rows):
        chosen = [row for row in rows if row.env == env]
        metric_titles = {name: cell["title"] for row in chosen for name, cell in row.metrics.items()}
        header = ["model", "episodes", "success (95% CI)", "mean reward", "mean steps", "failed calls", "lost",
                  *metric_titles.values()]
        lines = [header]
        for row in chosen:
            low, high = row.success_interval
            lines.append([row.model, str(row.episodes), f"{row.successes}/{row.episodes} {row.success_rate:.0%} "
                          f"[{low:.0%}-{high:.0%}]", _number(row.mean_reward, 3), _number(row.mean_steps),
                          str(row.failed_tool_calls), str(row.sessions_lost),
                          *(row.metrics[name]["text"] if name in row.metrics else "-" for name in metric_titles)])
        widths = [max(len(line[column]) for line in lines) for column in range(len(header))]
        text = [f"{env}"]
        for number, line in enumerate(lines):
            cells = [line[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(line[1:], widths[1:],
                                                                                       strict=True)]
            text.append("  ".join(cells).rstrip())
            if number == 0:
                text.append("  ".join("-" * width for width in widths))
        blocks.append("\n".join(text))
    return "\n\n".join(blocks)
