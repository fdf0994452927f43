"""What a wire format (a dialect) of model calls is to the proxy: a path, a reader, an answer and an error shape.

Every dialect reads its request into the one `ChatRequest` the proxy renders, samples and records (so ids,
log-probabilities, loss mask, continuation and the `TrainingTrace` are the same whatever the dialect), and answers
the recorded `Call` in its own shape, as JSON or as its streaming events.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from starlette.responses import JSONResponse, Response, StreamingResponse

from .chat import ChatRequest
from .records import Call

__all__ = ["Dialect", "event_stream"]


@dataclass(frozen=True)
class Dialect:
    """`path`: the route; `read`: a parsed JSON body to a checked `ChatRequest` (`RequestError` says what is
    wrong); `answer`: the recorded call as the dialect's response; `error`: (status, one-line message, code) as
    the dialect's error response."""

    path: str
    read: Callable[[Any], ChatRequest]
    answer: Callable[[Call, ChatRequest], Response]
    error: Callable[[int, str, str], JSONResponse]


def event_stream(events: Iterable[tuple[str | None, Any]]) -> StreamingResponse:
    """Server-sent events, each `(name, payload)` (no `event:` line when the name is None; a str payload as it is)."""

    async def chunks() -> Any:
        for name, payload in events:
            data = payload if isinstance(payload, str) else json.dumps(payload)
            yield (f"event: {name}\n" if name else "") + f"data: {data}\n\n"

    return StreamingResponse(chunks(), media_type="text/event-stream", headers={"cache-control": "no-cache"})
