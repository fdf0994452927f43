"""Episode metrics: the columns an environment adds to an evaluation table, declared once in its class.

An environment lists its metrics in `Environment.METRICS` and reports the current episode's values
from `episode_metrics()`:

    class Wordle(Environment[...]):
        METRICS = (
            Metric("won", "wins", "count", success=True),               # shown as k/n
            Metric("guesses", "guesses per win", "mean", where="won"),  # mean over won episodes only
            Metric("invalid_guesses", "invalid guesses", "sum"),        # total over every episode
        )

        def episode_metrics(self) -> dict[str, float]:
            return {"won": ..., "guesses": ..., "invalid_guesses": ...}

Servers publish the definitions in `/metadata` (`"metrics"`) and, to clients that ask for the
`metrics` feature in the `x-envkit-features` handshake header, the values after every reset, step
and tool call. `envkit eval` aggregates them per model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from .errors import ConfigurationError

__all__ = ["Metric", "MetricSummary", "Aggregate", "check_metrics", "metrics_from_metadata", "summarise"]

Aggregate = Literal["count", "mean", "sum"]
AGGREGATES: tuple[str, ...] = ("count", "mean", "sum")


@dataclass(frozen=True)
class Metric:
    """One episode metric and how a table aggregates it over episodes.

    Attributes:
        name: the key in `episode_metrics()` (an identifier, e.g. `"won"`).
        title: the column title (e.g. `"wins"`).
        aggregate: `count` — episodes where the value is true or non-zero, shown as k/n; `mean` — the
            average value; `sum` — the total over episodes.
        where: aggregate only over episodes where this other (count) metric holds, e.g. guesses per win.
        success: this metric says whether an episode succeeded (the table's success rate); one at most.
        description: a sentence for documentation and `/metadata`.
    """

    name: str
    title: str
    aggregate: Aggregate = "mean"
    where: str | None = None
    success: bool = False
    description: str = ""

    def describe(self) -> dict[str, Any]:
        """The definition as JSON (what `/metadata` lists)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Metric:
        """A definition read back from `/metadata`; unknown keys are ignored."""
        known = {key: data[key] for key in ("name", "title", "aggregate", "where", "success", "description")
                 if key in data}
        return cls(**known)


@dataclass(frozen=True)
class MetricSummary:
    """A metric aggregated over episodes: `value` (k for a count, the mean or the sum) over `episodes` episodes."""

    metric: Metric
    value: float | None
    episodes: int

    def text(self) -> str:
        """The cell as a table shows it: `k/n`, a mean with two decimals, a total, or `-` when undefined."""
        if self.value is None:
            return "-"
        if self.metric.aggregate == "count":
            return f"{int(self.value)}/{self.episodes}"
        if self.metric.aggregate == "sum":
            return f"{self.value:g}" if float(self.value).is_integer() else f"{self.value:.2f}"
        return f"{self.value:.2f}"


def check_metrics(metrics: Sequence[Metric], owner: str) -> None:
    """Raise `ConfigurationError` for metric definitions a table cannot aggregate, naming the fix."""
    names = [metric.name for metric in metrics]
    for metric in metrics:
        where = f"{owner}.METRICS, {metric.name!r}"
        if not isinstance(metric, Metric):
            raise ConfigurationError(f"{owner}.METRICS holds {metric!r}; list envkit.Metric(...) entries")
        if not metric.name.isidentifier():
            raise ConfigurationError(f"{where}: the name must be an identifier, e.g. 'invalid_guesses'")
        if names.count(metric.name) > 1:
            raise ConfigurationError(f"{where}: declared twice; give each metric its own name")
        if metric.aggregate not in AGGREGATES:
            raise ConfigurationError(f"{where}: aggregate must be one of {', '.join(AGGREGATES)}, "
                                     f"got {metric.aggregate!r}")
        if metric.where is not None:
            condition = next((other for other in metrics if other.name == metric.where), None)
            if condition is None or condition.aggregate != "count":
                raise ConfigurationError(f"{where}: where={metric.where!r} must name a count metric of the same "
                                         "environment (e.g. where='won')")
        if metric.success and metric.aggregate != "count":
            raise ConfigurationError(f"{where}: a success metric must aggregate as 'count' (it says yes or no)")
    if sum(metric.success for metric in metrics) > 1:
        raise ConfigurationError(f"{owner}.METRICS marks several metrics success=True; mark one")


def metrics_from_metadata(metadata: Mapping[str, Any]) -> tuple[Metric, ...]:
    """The metric definitions a server lists in `/metadata` (none from servers that list none)."""
    listed = metadata.get("metrics")
    if not isinstance(listed, list):
        return ()
    return tuple(Metric.from_dict(item) for item in listed if isinstance(item, dict) and "name" in item)


def _holds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)) and value != 0


def summarise(metric: Metric, episodes: Iterable[Mapping[str, Any]]) -> MetricSummary:
    """Aggregate `metric` over the episodes' metric values.

    A count is over every episode considered (one without the value, e.g. a lost session, counts as
    not holding); a mean or a sum is over the episodes that report a value.
    """
    considered = [episode for episode in episodes if metric.where is None or _holds(episode.get(metric.where))]
    if metric.aggregate == "count":
        return MetricSummary(metric, float(sum(_holds(episode.get(metric.name)) for episode in considered)),
                             len(considered))
    values = [float(value) for episode in considered if isinstance(value := episode.get(metric.name), (int, float))]
    if metric.aggregate == "sum":
        return MetricSummary(metric, sum(values), len(values))
    return MetricSummary(metric, sum(values) / len(values) if values else None, len(values))
