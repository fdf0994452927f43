"""Clients of a served environment: `EnvClient` (WebSocket, async and sync), the ORS client, Docker and placement.

    from envkit.client import EnvClient
"""

from .env_client import EnvClient, StepResult, SyncEnvClient, ToolResult, authentication_error
from .urls import http_url, websocket_url

__all__ = ["EnvClient", "StepResult", "SyncEnvClient", "ToolResult", "authentication_error", "http_url",
           "websocket_url"]
