"""What one benchmark session says and checks, without I/O.

A session resets, then sends its step frames one after another. Each step carries a token
unique to the session and the step (`RUN-SESSION-STEP`), spliced into the action wherever
the action says `{token}`; the reply must be an observation that contains that token, or the
step counts as a mismatch (a reply meant for another session, or for an earlier step).

The drivers in `drivers.py` move these bytes over a socket; everything they observe lands
in one shared `Tally`.
"""

from __future__ import annotations

import time
from array import array
from collections import Counter
from typing import Any, Callable

import orjson

__all__ = ["TOKEN", "ActionTemplate", "SessionScript", "Tally"]

#: Placeholder in an action that the session's token replaces.
TOKEN = "{token}"
RESET_FRAME = b'{"type":"reset","data":{}}'
#: How envkit and OpenEnv servers begin an observation frame; other replies are parsed to be sure.
OBSERVATION_START = b'{"type":"observation"'


class ActionTemplate:
    """The step frame `{"type": "step", "data": ACTION}` with `{token}` spliced in per step.

    `envelope` puts the action into another request instead (an MCP `tools/call`, an ORS `/call`).
    """

    def __init__(self, action: dict[str, Any] | None = None,
                 envelope: Callable[[dict[str, Any]], Any] = lambda action: {"type": "step", "data": action}) -> None:
        if action is None:
            action = {"message": TOKEN}
        if not isinstance(action, dict):
            raise ValueError(f"the action must be a JSON object of the environment's action fields, got {action!r}")
        self.action = action
        self.parts = orjson.dumps(envelope(action)).split(TOKEN.encode())

    @property
    def checks_echo(self) -> bool:
        """Whether replies can be checked: the action carries the token, so an echo returns it."""
        return len(self.parts) > 1

    def frame(self, token: bytes) -> bytes:
        return token.join(self.parts)


class Tally:
    """Everything a run observed: latencies, step counts, outcomes and failures by reason."""

    def __init__(self) -> None:
        self.step_latencies = array("d")
        self.connect_latencies = array("d")
        self.steps = 0
        #: perf_counter() when the latest step reply arrived: the end of the step window.
        self.last_step_at = 0.0
        self.mismatches = 0
        self.sessions_ok = 0
        self.failures: Counter[str] = Counter()

    def finish(self, outcome: str) -> None:
        if outcome == "ok":
            self.sessions_ok += 1
        else:
            self.failures[outcome] += 1


class SessionScript:
    """One session's frames and checks. Drivers call `reset_frame`, `on_reply` and `step_frame`.

    `on_reply` returns the next frame to send, or None when the session has nothing to send:
    after the reset reply (`ready` is then True and the driver waits for the start signal) or
    when it has ended (`outcome` is then "ok" or the reason it failed).
    """

    __slots__ = ("tally", "template", "checks_echo", "prefix", "remaining", "started", "sent_at", "token", "ready",
                 "outcome", "mismatched")

    def __init__(self, tally: Tally, template: ActionTemplate, run_id: str, index: int, steps: int) -> None:
        self.tally = tally
        self.template = template
        self.checks_echo = template.checks_echo
        self.prefix = f"{run_id}-{index:06d}-".encode()
        self.remaining = steps
        self.started = 0.0
        self.sent_at = 0.0
        self.token = b""
        self.ready = False
        self.outcome: str | None = None
        self.mismatched = False

    def connecting(self) -> None:
        """Mark the start of the connection; connect+reset latency is measured from here."""
        self.started = time.perf_counter()

    def reset_frame(self) -> bytes:
        return RESET_FRAME

    def step_frame(self) -> bytes:
        self.token = self.prefix + b"%06d" % self.remaining
        self.sent_at = time.perf_counter()
        return self.template.frame(self.token)

    def on_reply(self, raw: bytes) -> bytes | None:
        """Take a reply frame of the WebSocket protocol; the next frame to send, or None."""
        return self.take(raw, "" if raw.startswith(OBSERVATION_START) else _problem_with(raw))

    def take(self, raw: bytes, problem: str) -> bytes | None:
        """Take a reply that the driver found good (`problem` empty) or not (why); the next request, or None."""
        now = time.perf_counter()
        if self.outcome is not None:
            return None
        if problem:
            return self.fail(problem)
        tally = self.tally
        if not self.ready:
            tally.connect_latencies.append(now - self.started)
            self.ready = True
            return None if self.remaining else self.end()
        tally.step_latencies.append(now - self.sent_at)
        tally.steps += 1
        tally.last_step_at = now
        if self.checks_echo and self.token not in raw:
            tally.mismatches += 1
            self.mismatched = True
        self.remaining -= 1
        if self.remaining:
            return self.step_frame()
        return self.end()

    def end(self) -> None:
        """The session did all it set out to do."""
        self.outcome = "mismatch" if self.mismatched else "ok"
        self.tally.finish(self.outcome)
        return None

    def fail(self, reason: str) -> None:
        """The session ended early; the first reason given is the one counted."""
        if self.outcome is None:
            self.outcome = reason
            self.tally.finish(reason)
        return None

    def closed(self, code: int | None, reason: str = "") -> None:
        """The connection ended while the session still had work to do."""
        if self.outcome is None:
            self.fail(f"closed by server: {code} {reason}".rstrip() if code else "connection dropped")


def _problem_with(raw: bytes) -> str:
    """Why a reply is not an observation frame ("" when it is one after all)."""
    try:
        frame = orjson.loads(raw)
        kind = frame["type"]
    except (orjson.JSONDecodeError, TypeError, KeyError):
        return "reply is not a protocol frame"
    if kind == "observation":
        return ""
    if kind == "error":
        data = frame.get("data") or {}
        return f"error frame: {data.get('code', 'no code') if isinstance(data, dict) else 'no code'}"
    return f"unexpected reply type: {kind}"
