"""The wire protocol, without I/O: frame decoding and encoding, error codes and close codes.

Frames are JSON text, OpenEnv-compatible:

    client: {"type": "reset", "data": {...}} | {"type": "step", "data": {...}} | {"type": "state"}
            {"type": "close"} | {"type": "call", "data": {"tool": name, "args": {...}}}   (envkit)
    server: {"type": "observation", "data": {"observation": {...}, "reward": r, "done": d}}
            {"type": "state", "data": {...}} | {"type": "error", "data": {"message": m, "code": c}}
            {"type": "tool_result", "data": {"tool": name, "result": text, ...}}         (envkit)

Clients that name features in the `x-envkit-features` handshake header get extra fields in those
frames (`Features`); others get exactly OpenEnv's frames.

Both the server and the client use this module, so the two cannot drift apart.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import IntEnum
from typing import Any
from urllib.parse import parse_qs

import orjson

from .environment import Observation
from .model_codec import dump

__all__ = [
    "API_KEY_ENV", "API_KEY_HEADER", "key_headers",
    "SESSION_ID_HEADER", "REFUSED_HEADER", "FEATURES_HEADER", "FEATURES_QUERY", "Features", "ErrorCode", "CloseCode", "close_reason",
    "FrameError", "decode_frame", "to_json", "encode", "observation_payload", "observation_frame", "state_frame", "error_frame",
    "tool_result_payload", "tool_result_frame", "tool_result_text", "call_tool_frame",
]

#: The header a client sends its API key in.
API_KEY_HEADER = "x-api-key"
#: The environment variable servers and clients read the API key from by default.
API_KEY_ENV = "ENVKIT_API_KEY"
SESSION_ID_HEADER = "x-envkit-session-id"
#: Sent with the handshake of a connection the server accepts only to refuse it (capacity, shutdown, factory).
REFUSED_HEADER = "x-envkit-refused"
#: Sent by a client with the handshake: the envkit additions it wants in reply frames (see `Features`). Plain OpenEnv
#: clients do not send it and get plain frames.
FEATURES_HEADER = "x-envkit-features"
#: The same request as a query parameter of the `/ws` URL (`/ws?features=text`), for browsers: they cannot set
#: WebSocket handshake headers.
FEATURES_QUERY = "features"


def key_headers() -> dict[str, str]:
    """The header a client sends the key in: `X-API-Key` from `$ENVKIT_API_KEY` (none when it is unset).

    `X-API-Key` rather than `Authorization`, which the Hugging Face Hub takes on private Spaces.
    """
    key = os.environ.get(API_KEY_ENV, "").strip()
    return {"X-API-Key": key} if key else {}


@dataclass(frozen=True)
class Features:
    """What a client asked for in its `x-envkit-features` header (comma-separated names).

    Attributes:
        text: observation frames carry `"text"`, the observation rendered by `Observation.as_text()`
            (what a language model reads).
        metrics: observation and tool result frames carry `"metrics"`, the environment's
            `episode_metrics()` after the move (environments that declare `METRICS` only).
    """

    text: bool = False
    metrics: bool = False

    @classmethod
    def parse(cls, header: str, query: str | bytes = "") -> Features:
        """The features named in a header value such as `"text, metrics"`, and in the `features` parameters of
        the connection URL's `query` string (`features=text`); unknown names are ignored."""
        values = [header]
        if query:
            values += parse_qs(query.decode("latin-1") if isinstance(query, bytes) else query).get(FEATURES_QUERY, [])
        names = {name.strip() for value in values for name in value.split(",")}
        return cls(text="text" in names, metrics="metrics" in names)


class ErrorCode:
    """Codes of error frames. The first six are OpenEnv's; the rest are envkit's additions."""

    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    FACTORY_ERROR = "FACTORY_ERROR"
    MESSAGE_TOO_BIG = "MESSAGE_TOO_BIG"
    NOT_RESET = "NOT_RESET"
    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    #: `/ws?session_id=...` named a session that cannot be attached to: unknown, ended, or already attached.
    SESSION_UNAVAILABLE = "SESSION_UNAVAILABLE"


class CloseCode(IntEnum):
    """WebSocket close codes the server uses, each saying why the session ended."""

    NORMAL = 1000
    SHUTDOWN = 1001
    INTERNAL_ERROR = 1011
    SERVICE_RESTART = 1012
    MESSAGE_TOO_BIG = 1009
    CAPACITY = 1013
    IDLE_TIMEOUT = 4408
    SESSION_UNAVAILABLE = 4404
    ENVIRONMENT_LOST = 4410


_CLOSE_REASONS = {
    CloseCode.NORMAL: "closed normally",
    CloseCode.SHUTDOWN: "server shut down",
    CloseCode.INTERNAL_ERROR: "server error",
    CloseCode.SERVICE_RESTART: "server restarting",
    CloseCode.MESSAGE_TOO_BIG: "message too big",
    CloseCode.CAPACITY: "server at capacity",
    CloseCode.IDLE_TIMEOUT: "idle timeout",
    CloseCode.SESSION_UNAVAILABLE: "no such session to attach to",
    CloseCode.ENVIRONMENT_LOST: "the session's environment was lost",
    1006: "connection dropped without a close frame",
}


def close_reason(code: int | None, reason: str = "") -> str:
    """A human description of why a connection closed, from its close code and reason text."""
    if reason:
        return reason
    if code is None:
        return "connection dropped (no close frame; the server vanished or the network failed)"
    return _CLOSE_REASONS.get(code, f"closed with code {code}")


class FrameError(Exception):
    """A client frame that cannot be served; becomes an error frame with `code`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def decode_frame(raw: str | bytes) -> tuple[str, Any]:
    """Parse one frame into `(type, data)`; raises `FrameError` for what is not a protocol frame."""
    try:
        frame = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise FrameError(ErrorCode.INVALID_JSON, f"Invalid JSON: {error}; send one JSON object per frame") from None
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise FrameError(ErrorCode.VALIDATION_ERROR,
                         'Invalid message: expected a JSON object with a string "type", e.g. {"type": "reset"}')
    return frame["type"], frame.get("data")


#: What `to_json` accepts beyond plain JSON values when it must: numpy values, and dicts with keys that are not strings.
_ANY_KEYS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def to_json(value: Any, beyond_plain: int = _ANY_KEYS) -> bytes:
    """`value` as JSON: plain values at orjson's full speed, and only when that fails, with the `beyond_plain`
    options (numpy values, other keys), which cost 2-5x as much on every call even when nothing needs them."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return orjson.dumps(value, option=beyond_plain)


def encode(frame: dict[str, Any]) -> str:
    """Serialise one frame to JSON text (numpy values as JSON; integer keys as strings, as pydantic's JSON mode
    writes them: OpenEnv environments keep such keys in their state and observations)."""
    return to_json(frame).decode()


def observation_payload(observation: Observation) -> dict[str, Any]:
    """The `data` of an observation frame: the observation's fields, with reward and done beside them."""
    fields = dump(observation)
    reward = fields.pop("reward")
    done = fields.pop("done")
    payload = {"observation": fields, "reward": reward, "done": done}
    if fields.get("metadata"):
        payload["metadata"] = fields["metadata"]
    return payload


def observation_frame(observation: Observation, *, with_text: bool = False,
                      metrics: dict[str, Any] | None = None) -> str:
    data = observation_payload(observation)
    if with_text:
        data["text"] = observation.as_text()
    if metrics is not None:
        data["metrics"] = metrics
    return encode({"type": "observation", "data": data})


def state_frame(state: Any) -> str:
    data = state.model_dump() if hasattr(state, "model_dump") else dict(state or {})
    return encode({"type": "state", "data": data})


def error_frame(code: str, message: str, **details: Any) -> str:
    return encode({"type": "error", "data": {"message": message, "code": code, **details}})


def tool_result_text(result: Any) -> str:
    """What a language model reads of a tool's result: a string as is, an Observation through `as_text()`, JSON else."""
    if isinstance(result, str):
        return result
    if isinstance(result, Observation):
        return result.as_text()
    return to_json(result).decode()


def tool_result_payload(tool: str, result: Any) -> dict[str, Any]:
    """What a tool returned, as every surface reports it: `result` (the text an agent reads), and
    `observation`, `reward` and `done` when the tool returned an `Observation` (None otherwise)."""
    data: dict[str, Any] = {"tool": tool}
    if isinstance(result, Observation):
        data.update(observation_payload(result))
    else:
        data.update(observation=None, reward=None, done=None)
    data["result"] = tool_result_text(result)
    return data


def call_tool_frame(tool_name: Any, result: Any = None, *, error: tuple[str, str] | None = None) -> str:
    """OpenEnv's `CallToolObservation` in an observation frame, the answer to a `call_tool` step: `result` as MCP
    tool-call content (its text, and the value itself as `data`), or `error` as `(error_type, message)`, where
    error_type is OpenEnv's (`tool_not_found`, `invalid_args`, `execution_error`). A tool that returned an
    Observation gives the frame its reward and done."""
    reward, done = None, False
    if error is not None:
        answer = None
        problem: dict[str, str] | None = {"error_type": error[0], "message": error[1]}
    else:
        value = result
        if isinstance(result, Observation):
            value = observation_payload(result)
            reward, done = result.reward, result.done
        answer = {"content": [{"type": "text", "text": tool_result_text(result)}], "data": value, "is_error": False}
        problem = None
    observation = {"metadata": {}, "tool_name": tool_name, "result": answer, "error": problem}
    return encode({"type": "observation", "data": {"observation": observation, "reward": reward, "done": done}})


def tool_result_frame(tool: str, result: Any, *, metrics: dict[str, Any] | None = None) -> str:
    data = tool_result_payload(tool, result)
    if metrics is not None:
        data["metrics"] = metrics
    return encode({"type": "tool_result", "data": data})
