"""Server counters, served at `GET /metrics` in the Prometheus text format.

One `ServerMetrics` per app. The session pool counts sessions opened and closed, the socket
handler counts every frame it answers (by type, with its latency) and the error frames it sends,
and the transports count refusals and bad client input. Every update is an integer increment or
two on plain attributes, so counting costs a step nothing measurable.

Bad client input and refusals are also logged, at most one WARNING line per kind per interval
(`RateLimitedLog`), so an attack shows in the log without flooding it and never with a traceback.
"""

from __future__ import annotations

import logging
import traceback
from bisect import bisect_left

from ..errors import EnvkitError
from .quiet_log import RateLimitedLog

__all__ = ["ServerMetrics", "FRAME_TYPES", "LATENCY_BUCKETS_S", "CONTENT_TYPE"]

#: Frame types counted by name; any other `"type"` a client sends is counted as `unknown`, one it cannot
#: decode as `invalid`, so the label set stays fixed whatever clients send.
FRAME_TYPES = ("reset", "step", "state", "call", "close", "unknown", "invalid")
#: Upper bounds (seconds) of the answer-latency histogram's buckets.
LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                     5.0, 10.0, 30.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

logger = logging.getLogger("envkit.server")


class _Histogram:
    """Counts per latency bucket (not cumulative; `render` adds them up) and their sum."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.total = 0.0


class ServerMetrics:
    """What one server has done since it started; `render(pool)` writes it as Prometheus text."""

    def __init__(self, log: RateLimitedLog | None = None) -> None:
        self.log = log or RateLimitedLog(logger)
        self.sessions_opened = 0
        #: Sessions ended, by the close code the server sent (1000 normal, 1001 shutdown, 4408 idle, ...).
        self.sessions_closed: dict[int, int] = {}
        #: Connections refused, by reason (capacity, shutdown, factory, ...).
        self.refusals: dict[str, int] = {}
        #: Client input that was not the protocol, by kind (invalid_json, invalid_utf8, bad_handshake, ...).
        self.bad_input: dict[str, int] = {}
        #: Error frames sent, by code (the client's mistakes and the environment's exceptions alike).
        self.error_replies: dict[str, int] = {}
        self.frames = {kind: _Histogram() for kind in FRAME_TYPES}

    # -- counting (cheap: called on every frame) -------------------------------------------

    def answered(self, kind: str, seconds: float) -> None:
        """A frame of type `kind` was answered in `seconds` (from its arrival to its reply)."""
        histogram = self.frames.get(kind) or self.frames["unknown"]
        histogram.counts[bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        histogram.total += seconds

    def error_reply(self, code: str) -> None:
        self.error_replies[code] = self.error_replies.get(code, 0) + 1

    def session_opened(self) -> None:
        self.sessions_opened += 1

    def session_closed(self, code: int) -> None:
        self.sessions_closed[code] = self.sessions_closed.get(code, 0) + 1

    def refused(self, reason: str, detail: str = "", *, log: bool = True) -> None:
        """A connection was refused for `reason` (a short fixed word: `capacity`, `auth`, ...).

        Logged as one WARNING per reason per interval unless `log` is False (the caller logged it already).
        """
        self.refusals[reason] = self.refusals.get(reason, 0) + 1
        if log:
            self.log.warning(f"refused:{reason}", "refused a connection (%s)%s", reason,
                             f": {detail}" if detail else "")

    def bad_client_input(self, kind: str, detail: str = "") -> None:
        """A client sent something that is not the protocol; counted, and logged as one WARNING per kind per interval."""
        self.bad_input[kind] = self.bad_input.get(kind, 0) + 1
        self.log.warning(f"bad:{kind}", "bad client input (%s)%s", kind, f": {detail}" if detail else "")

    def environment_raised(self, session_id: str, error: BaseException) -> None:
        """An environment raised in a session. A ValueError is how an environment refuses a move (a bad guess, a
        step after the end): one INFO line. envkit's own errors (no Docker engine here, a sandbox that died): one WARNING
        line. Anything else is a bug in the environment: an ERROR with its traceback,
        for the environment's author. Each at most once per interval per kind and place, since a client can make
        an environment raise on every frame it sends."""
        if isinstance(error, ValueError):
            self.log.log(logging.INFO, "execution_error", "environment raised in session %s: %r", session_id, error)
            return
        if isinstance(error, EnvkitError):   # envkit's own errors say what is wrong here and what to do
            self.log.log(logging.WARNING, f"envkit_error:{type(error).__name__}", "session %s: %s: %s", session_id,
                         type(error).__name__, error)
            return
        frames = traceback.extract_tb(error.__traceback__)
        place = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
        self.log.log(logging.ERROR, f"environment_bug:{type(error).__name__}:{place}",
                     "environment raised %s in session %s (a bug in the environment?)", type(error).__name__,
                     session_id, exc_info=error)

    # -- the /metrics document --------------------------------------------------------------

    def render(self, active: int, max_sessions: int) -> str:
        """The Prometheus text exposition of every counter, with the pool's live session counts."""
        lines: list[str] = []

        def family(name: str, kind: str, text: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(f"{name}{labels} {_number(value)}" for labels, value in samples)

        family("envkit_sessions_active", "gauge", "Sessions open or being opened.", [("", active)])
        family("envkit_sessions_max", "gauge", "Sessions the server holds at most (max_concurrent_envs).",
               [("", max_sessions)])
        family("envkit_sessions_opened_total", "counter", "Sessions opened.", [("", self.sessions_opened)])
        family("envkit_sessions_closed_total", "counter", "Sessions ended, by the close code the server sent.",
               [(_labels(code=code), count) for code, count in sorted(self.sessions_closed.items())])
        family("envkit_refusals_total", "counter", "Connections refused, by reason.",
               [(_labels(reason=reason), count) for reason, count in sorted(self.refusals.items())])
        family("envkit_bad_input_total", "counter", "Client input that was not the protocol, by kind.",
               [(_labels(kind=kind), count) for kind, count in sorted(self.bad_input.items())])
        family("envkit_error_replies_total", "counter", "Error frames sent, by code.",
               [(_labels(code=code), count) for code, count in sorted(self.error_replies.items())])
        family("envkit_frames_total", "counter", "Client frames answered, by type.",
               [(_labels(type=kind), sum(h.counts)) for kind, h in self.frames.items()])
        lines.append("# HELP envkit_frame_seconds Time from a client frame's arrival to its reply, by frame type.")
        lines.append("# TYPE envkit_frame_seconds histogram")
        for kind, histogram in self.frames.items():
            cumulative = 0
            for bound, count in zip(LATENCY_BUCKETS_S, histogram.counts):
                cumulative += count
                lines.append(f"envkit_frame_seconds_bucket{_labels(type=kind, le=_number(bound))} {cumulative}")
            cumulative += histogram.counts[-1]
            lines.append(f"envkit_frame_seconds_bucket{_labels(type=kind, le='+Inf')} {cumulative}")
            lines.append(f"envkit_frame_seconds_sum{_labels(type=kind)} {_number(histogram.total)}")
            lines.append(f"envkit_frame_seconds_count{_labels(type=kind)} {cumulative}")
        return "\n".join(lines) + "\n"


def _labels(**labels: object) -> str:
    text = ",".join(f'{name}="{_escape(str(value))}"' for name, value in labels.items())
    return "{" + text + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return repr(value) if isinstance(value, float) else str(value)
