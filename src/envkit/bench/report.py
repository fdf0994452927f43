"""Benchmark results: what a load, a ramp or a churn run measured, as dicts and as text."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

__all__ = ["latency_summary", "LoadResult", "RampResult", "ChurnResult", "LOADGEN_SATURATED"]

#: Above this share of one core the load generator, not the server, may be what limits the figures.
LOADGEN_SATURATED = 0.9


def latency_summary(seconds: Iterable[float]) -> dict[str, float | None]:
    """p50 / p90 / p99 / max of latencies given in seconds, in milliseconds (None when empty)."""
    ordered = sorted(seconds)
    if not ordered:
        return {"p50": None, "p90": None, "p99": None, "max": None}

    def rank(fraction: float) -> float:
        return round(ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)] * 1000, 3)

    return {"p50": rank(0.50), "p90": rank(0.90), "p99": rank(0.99), "max": round(ordered[-1] * 1000, 3)}


def _ms(summary: dict[str, float | None]) -> str:
    return " / ".join("-" if summary[key] is None else f"{summary[key]:.2f}" for key in ("p50", "p90", "p99", "max"))


def _failures_text(failures: dict[str, int]) -> list[str]:
    return [f"  {count:>7}  {reason}" for reason, count in sorted(failures.items(), key=lambda item: -item[1])]


@dataclass
class LoadResult:
    """N sessions, each connecting, resetting and then stepping S times in sequence.

    Every session connects and resets before any steps, and none closes before every session has
    finished stepping: `steps_per_s` is `steps / step_seconds`, where `step_seconds` runs from the
    moment all sessions start stepping (a barrier) to the last step reply. Connecting, resetting
    and closing fall outside it; `open_seconds` and `connect_reset_ms` measure the opening.
    """

    url: str
    client: str
    sessions: int
    steps_per_session: int
    sessions_ok: int
    steps: int
    #: From the barrier that starts every session's steps to the last step reply.
    step_seconds: float
    #: Steps in the step window: opening and closing sessions are not part of it.
    steps_per_s: float
    step_latency_ms: dict[str, float | None]
    connect_reset_ms: dict[str, float | None]
    failures: dict[str, int]
    #: Replies that did not carry the session's own token; None when the action carries no token.
    mismatches: int | None
    #: CPU time of the load generator while the sessions were stepping, as a share of one core.
    loadgen_cpu: float
    #: The whole run: opening, stepping and closing.
    wall_s: float
    #: From the start until every session had connected and reset (or failed to).
    open_seconds: float = 0.0
    mode: str = "load"

    @property
    def success_rate(self) -> float:
        return self.sessions_ok / self.sessions if self.sessions else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "success_rate": round(self.success_rate, 4)}

    def text(self) -> str:
        lines = [
            f"{self.sessions} sessions x {self.steps_per_session} steps against {self.url} ({self.client} client)",
            f"  steps/s           {self.steps_per_s:,.0f}  ({self.steps} steps in {self.step_seconds:.2f} s, "
            f"after all sessions opened in {self.open_seconds:.2f} s)",
            f"  step latency ms   p50/p90/p99/max  {_ms(self.step_latency_ms)}",
            f"  connect+reset ms  p50/p90/p99/max  {_ms(self.connect_reset_ms)}",
            f"  sessions ok       {self.sessions_ok}/{self.sessions}  ({self.success_rate:.1%})",
            "  correctness       " + ("not checked (the action carries no {token})" if self.mismatches is None
                                      else f"{self.mismatches} mismatched replies"),
            f"  load generator    {self.loadgen_cpu:.0%} of one core" + (
                "  (near saturation: the figures may be limited by the load generator)"
                if self.loadgen_cpu > LOADGEN_SATURATED else ""),
        ]
        if self.failures:
            lines += ["  failures:", *_failures_text(self.failures)]
        return "\n".join(lines)


@dataclass
class RampResult:
    """The largest number of sessions held open at once with at least `threshold` of them succeeding."""

    url: str
    client: str
    max_sessions_held: int
    threshold: float
    stopped_because: str
    levels: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    mode: str = "ramp"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        lines = [f"ramp against {self.url} ({self.client} client): {self.max_sessions_held} sessions held open at once "
                 f"with >= {self.threshold:.0%} success; stopped: {self.stopped_because} ({self.wall_s:.1f} s)",
                 f"  {'sessions':>9} {'success':>8} {'steps/s':>9} {'connect p99 ms':>15} {'seconds':>8}"]
        for level in self.levels:
            p99 = level["connect_reset_ms"]["p99"]
            lines.append(f"  {level['sessions']:>9} {level['success_rate']:>8.1%} {level['steps_per_s']:>9,.0f} "
                         f"{'-' if p99 is None else f'{p99:.1f}':>15} {level['wall_s']:>8.1f}")
        return "\n".join(lines)


@dataclass
class ChurnResult:
    """Sessions opened, reset and closed per second by `workers` concurrent loops."""

    url: str
    client: str
    workers: int
    sessions: int
    seconds: float
    sessions_per_s: float
    connect_reset_ms: dict[str, float | None]
    failures: dict[str, int]
    loadgen_cpu: float
    mode: str = "churn"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        lines = [f"churn against {self.url} ({self.client} client, {self.workers} workers)",
                 f"  sessions opened+closed/s  {self.sessions_per_s:,.0f}  ({self.sessions} in {self.seconds:.1f} s)",
                 f"  connect+reset ms          p50/p90/p99/max  {_ms(self.connect_reset_ms)}",
                 f"  load generator            {self.loadgen_cpu:.0%} of one core"]
        if self.failures:
            lines += ["  failures:", *_failures_text(self.failures)]
        return "\n".join(lines)
