"""Clients of a served environment: `EnvClient` (WebSocket, async and sync), the ORS client, Docker and placement.

    from envkit.client import EnvClient
"""

from ..moved import moved_names
from .env_client import EnvClient, StepResult, SyncEnvClient, ToolResult, authentication_error
from .urls import http_url, websocket_url

__all__ = ["EnvClient", "StepResult", "SyncEnvClient", "ToolResult", "authentication_error", "http_url",
           "websocket_url"]

__getattr__ = moved_names(__name__, "envkit.client.env_client")   # what `envkit.client` held before it was a package
