"""The echo protocol answered by hand, with orjson: the reference work for the baseline servers.

Replies have the shape envkit's and OpenEnv's echo servers send, field for field, so every
server in the comparison does the same work per frame.
"""

from __future__ import annotations

import uuid

import orjson

REWARD_PER_CHARACTER = 0.1
_READY = {"echoed_message": "Echo environment ready!", "message_length": 0, "metadata": {}}


class EchoSession:
    """One connection's episode: an id and a step count."""

    __slots__ = ("episode_id", "step_count")

    def __init__(self) -> None:
        self.episode_id = ""
        self.step_count = 0


def _error(code: str, message: str) -> bytes:
    return orjson.dumps({"type": "error", "data": {"message": message, "code": code}})


def answer(raw: bytes | str, session: EchoSession) -> bytes | None:
    """The reply to one client frame, or None when the client asked to close."""
    try:
        frame = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        return _error("INVALID_JSON", f"Invalid JSON: {error}")
    kind = frame.get("type") if isinstance(frame, dict) else None
    if kind == "step":
        data = frame.get("data")
        message = data.get("message") if isinstance(data, dict) else None
        if not isinstance(message, str):
            return _error("VALIDATION_ERROR", "Invalid message: data.message must be a string")
        session.step_count += 1
        metadata = {"original_message": message, "step": session.step_count}
        observation = {"echoed_message": message, "message_length": len(message), "metadata": metadata}
        return orjson.dumps({"type": "observation", "data": {"observation": observation,
                                                              "reward": len(message) * REWARD_PER_CHARACTER,
                                                              "done": False, "metadata": metadata}})
    if kind == "reset":
        session.episode_id, session.step_count = uuid.uuid4().hex, 0
        return orjson.dumps({"type": "observation", "data": {"observation": _READY, "reward": 0.0, "done": False}})
    if kind == "state":
        return orjson.dumps({"type": "state", "data": {"episode_id": session.episode_id,
                                                        "step_count": session.step_count}})
    if kind == "close":
        return None
    return _error("UNKNOWN_TYPE", f"Unknown message type: {kind}")
