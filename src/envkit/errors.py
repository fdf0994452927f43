"""envkit's exceptions: one small hierarchy, each carrying the facts a caller needs.

Server-side definition errors (`ToolDefinitionError`, `ConfigurationError`) are raised at start-up.
Client-side errors say how a call failed: the server refused the session (`CapacityError`), the
server answered with an error frame (`EnvError`), or the session is gone (`SessionLostError`).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "EnvkitError",
    "ToolDefinitionError",
    "ConfigurationError",
    "EnvironmentLostError",
    "ClientError",
    "EnvConnectionError",
    "CapacityError",
    "AuthenticationError",
    "EnvError",
    "SessionLostError",
    "ProtocolError",
]


class EnvkitError(Exception):
    """Base of every envkit error."""


class ToolDefinitionError(EnvkitError, TypeError):
    """A `@tool` method cannot be described to a model (missing hint, docstring or argument text)."""


class ConfigurationError(EnvkitError, ValueError):
    """`create_app` or `envkit serve` was given settings that cannot work together."""


class EnvironmentLostError(EnvkitError):
    """Raised by an environment whose session cannot go on because what it holds is gone (its container died).

    The server ends that session on every surface (WebSocket close code 4410), so its client gets
    `SessionLostError` and never a fresh game in its place.
    """


class ClientError(EnvkitError):
    """Base of the errors an `EnvClient` raises."""


class EnvConnectionError(ClientError, ConnectionError):
    """No session could be opened: the server is unreachable or refused the handshake."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot connect to {url}: {reason}")
        self.url = url
        self.reason = reason


class CapacityError(EnvConnectionError):
    """The server already holds its maximum number of sessions; retry later or raise its limit."""

    def __init__(self, url: str, reason: str, active_sessions: int | None = None, max_sessions: int | None = None) -> None:
        super().__init__(url, reason)
        self.active_sessions = active_sessions
        self.max_sessions = max_sessions


class AuthenticationError(EnvConnectionError):
    """The server refused the request for its API key (HTTP 401), or refused the client's Origin or Host (403).

    Attributes:
        status: the HTTP status of the refusal.
        refusal: the server's reason code (`missing_api_key`, `wrong_api_key`, `origin_not_allowed`,
            `host_not_allowed`), or None when the server did not say.
    """

    def __init__(self, url: str, reason: str, status: int = 401, refusal: str | None = None) -> None:
        super().__init__(url, reason)
        self.status = status
        self.refusal = refusal


class EnvError(ClientError):
    """The server answered a call with an error frame; the session itself is still open.

    `code` is the wire code (`VALIDATION_ERROR`, `EXECUTION_ERROR`, `INVALID_JSON`, ...).
    """

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details or {}


class SessionLostError(ClientError):
    """The connection that held the episode is gone; its state cannot be recovered.

    Raised by the call that was pending when the connection dropped and by every later `step`,
    `state` or tool call. Only `reset()` opens a new session.

    Attributes:
        reason: what ended the session, in words (idle timeout, server shutdown, ...).
        close_code: the WebSocket close code, or None when the peer vanished without one.
        session_id: the server's id of the lost session, when the server sent one.
    """

    def __init__(self, reason: str, close_code: int | None = None, session_id: str | None = None) -> None:
        text = f"session lost: {reason}"
        if close_code is not None:
            text += f" (close code {close_code})"
        if session_id:
            text += f" [session {session_id}]"
        super().__init__(text)
        self.reason = reason
        self.close_code = close_code
        self.session_id = session_id


class ProtocolError(ClientError):
    """The server sent something that is not the wire protocol."""
