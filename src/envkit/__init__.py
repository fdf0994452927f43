"""envkit: build, serve, publish and train against stateful environments for LLM agents.

    from envkit import Environment, Action, Observation, State, tool, create_app, EnvClient

The server (`create_app`, FastAPI) and the client (`EnvClient`, websockets) load on first use,
so `import envkit` stays quick for environment code and command-line start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .environment import Action, Environment, Observation, State, UnknownSplitError, opening_text
from .errors import (
    AuthenticationError,
    CapacityError,
    ClientError,
    ConfigurationError,
    EnvConnectionError,
    EnvError,
    EnvironmentLostError,
    EnvkitError,
    ProtocolError,
    SessionLostError,
    ToolDefinitionError,
)
from .episode_metrics import Metric
from .tools import ToolSpec, tool, tool_specs
from .version import __version__

if TYPE_CHECKING:
    from .app import create_app
    from .client import EnvClient, StepResult, SyncEnvClient, ToolResult
    from .transport.uvicorn_server import run_server

_LAZY = {
    "create_app": "app", "run_server": "transport.uvicorn_server",
    "EnvClient": "client", "StepResult": "client", "SyncEnvClient": "client", "ToolResult": "client",
}

__all__ = [
    "Action", "AuthenticationError", "CapacityError", "ClientError", "ConfigurationError", "EnvClient",
    "EnvConnectionError", "EnvError",
    "Environment", "EnvironmentLostError", "EnvkitError", "Metric", "Observation", "ProtocolError", "SessionLostError", "State", "StepResult",
    "SyncEnvClient", "ToolDefinitionError", "ToolResult", "ToolSpec", "UnknownSplitError", "create_app", "run_server", "tool",
    "opening_text", "tool_specs", "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'envkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
