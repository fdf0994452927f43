"""A capture session: one rollout's key, call budget, sampling policy and recorded calls.

The API key is the session: whoever holds it reaches this session's records and no other's. Each call the
proxy answered is kept as a `Call`: exactly what the engine was given and what it sampled, linked to the call it
continues (`parent_id`) and to the first call of its chain (`root_id`).
"""

from __future__ import annotations

import secrets
import threading
from typing import Any

from .engine import Sampling
from .records import Call
from .trace import training_trace

__all__ = ["CaptureSession", "BudgetExhausted"]


class BudgetExhausted(RuntimeError):
    """The session has made all the calls its budget allows."""


class CaptureSession:
    """One rollout's session on a `CaptureProxy` (made by `proxy.open_session`).

    `api_key`: the only key that reaches this session; `calls`: calls answered; `roots`: chains started (1 for an
    agent that only ever extends its conversation; more when it rewrote its history); `refused`: calls refused
    for want of budget; `records`: the calls themselves."""

    def __init__(self, *, max_calls: int, sampling: Sampling, on_close: Any = None) -> None:
        if isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 1:
            raise ValueError(f"max_calls must be a positive integer, got {max_calls!r}")
        self.api_key = f"envkit-{secrets.token_urlsafe(24)}"
        self.session_id = secrets.token_hex(6)
        self.max_calls = max_calls
        self.sampling = sampling
        self.refused = 0
        self.closed = False
        self._records: list[Call] = []
        self._reserved = 0
        self._lock = threading.Lock()
        self._on_close = on_close

    @property
    def calls(self) -> int:
        return len(self._records)

    @property
    def roots(self) -> int:
        with self._lock:
            return sum(call.parent_id is None for call in self._records)

    @property
    def records(self) -> list[Call]:
        with self._lock:
            return list(self._records)

    def reserve(self) -> None:
        """Take one call of the budget (`BudgetExhausted` when none is left; the refusal is counted)."""
        with self._lock:
            if len(self._records) + self._reserved >= self.max_calls:
                self.refused += 1
                raise BudgetExhausted(f"this session has used its {self.max_calls} model calls (max_calls); its "
                                      "record is kept: end the episode")
            self._reserved += 1

    def release(self) -> None:
        """Give back a reserved call that was not made."""
        with self._lock:
            self._reserved -= 1

    def record(self, call: Call) -> None:
        """Keep a call made under a reservation."""
        with self._lock:
            self._reserved -= 1
            self._records.append(call)

    def new_node_id(self) -> str:
        with self._lock:
            return f"{self.session_id}-{len(self._records) + self._reserved}-{secrets.token_hex(3)}"

    def trace(self, reward: float | None = None, **metadata: Any) -> dict[str, Any]:
        """This rollout as an OpenEnv `TrainingTrace` (schema version 1), a JSON-able dict: every call a turn,
        `reward` and `metadata` in each turn's metadata (the schema has no other place for them)."""
        return training_trace(self.records, reward=reward, session_id=self.session_id, metadata=metadata)

    def close(self) -> None:
        """Stop serving this session's key; its records stay readable here."""
        self.closed = True
        if self._on_close is not None:
            self._on_close(self)

    def __enter__(self) -> CaptureSession:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
