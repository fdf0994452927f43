"""Logging that an attack cannot flood: one line per kind of event per interval, and transport logs sorted.

`RateLimitedLog` writes the first event of a kind at once and holds back the rest of that kind for
`interval_s`, counting them into the next line it writes. `TransportLog` stands in for the logger
of uvicorn's protocols: what that library reports about a client's bad input (invalid UTF-8, a
broken frame, an oversized or stalled handshake) becomes a count in `ServerMetrics` and a
rate-limited WARNING, never a traceback; its per-connection chatter goes
to DEBUG; anything else passes through unchanged.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

__all__ = ["BadInputCounter", "RateLimitedLog", "TransportLog", "LOG_INTERVAL_S"]


class BadInputCounter(Protocol):
    """What counts bad client input by kind (`ServerMetrics`)."""

    def bad_client_input(self, kind: str, detail: str = "") -> None: ...

#: Interval of the rate-limited warnings, in seconds.
LOG_INTERVAL_S = 60.0


class RateLimitedLog:
    """At most one line per kind per `interval_s`; how many were held back is said in the next one."""

    def __init__(self, logger: logging.Logger, interval_s: float = LOG_INTERVAL_S) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._quiet_until: dict[str, float] = {}
        self._held_back: dict[str, int] = {}

    def warning(self, kind: str, message: str, *args: Any) -> None:
        """Log `message % args` unless a line of this `kind` was logged less than `interval_s` ago."""
        self.log(logging.WARNING, kind, message, *args)

    def log(self, level: int, kind: str, message: str, *args: Any, exc_info: BaseException | None = None) -> None:
        """`warning` at another level (with `exc_info`'s traceback when given)."""
        now = time.monotonic()
        if now < self._quiet_until.get(kind, 0.0):
            self._held_back[kind] = self._held_back.get(kind, 0) + 1
            return
        self._quiet_until[kind] = now + self.interval_s
        held_back = self._held_back.pop(kind, 0)
        if held_back:
            message += " (and %d more like it since the last such line; at most one per %gs)"
            args = (*args, held_back, self.interval_s)
        self.logger.log(level, message, *args, exc_info=exc_info)


class TransportLog:
    """A logger for uvicorn's protocol objects that sorts what they log about clients.

    `rules` maps the start of a message (its format string) to a kind of bad client input, or to
    None for routine per-connection messages, which go to DEBUG. Messages no rule matches pass
    through to `logger` as they are.
    """

    def __init__(self, logger: logging.Logger, metrics: BadInputCounter | None, rules: dict[str, str | None]) -> None:
        self.logger = logger
        self.name = logger.name
        self.metrics = metrics
        self.rules = tuple(rules.items())

    @property
    def level(self) -> int:
        return self.logger.level

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 — the logging API's name
        return self.logger.isEnabledFor(level)

    def log(self, level: int, message: Any, *args: Any, **kwargs: Any) -> None:
        if level >= logging.INFO and isinstance(message, str):
            for start, kind in self.rules:
                if message.startswith(start):
                    if kind is None:
                        self.logger.debug(message, *args)
                    elif self.metrics is not None:
                        self.metrics.bad_client_input(kind, _text(message, args))
                    else:
                        self.logger.debug(message, *args)
                    return
        self.logger.log(level, message, *args, **kwargs)

    def debug(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self.log(logging.DEBUG, message, *args, **kwargs)

    def info(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self.log(logging.INFO, message, *args, **kwargs)

    def warning(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self.log(logging.WARNING, message, *args, **kwargs)

    def error(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self.log(logging.ERROR, message, *args, **kwargs)

    def exception(self, message: Any, *args: Any, exc_info: Any = True, **kwargs: Any) -> None:
        self.log(logging.ERROR, message, *args, exc_info=exc_info, **kwargs)

    def critical(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self.log(logging.CRITICAL, message, *args, **kwargs)


def _text(message: str, args: tuple[Any, ...]) -> str:
    try:
        text = message % args if args else message
    except (TypeError, ValueError):
        text = message
    return text.strip()[:200]
