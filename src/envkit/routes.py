"""HTTP routes beside the WebSocket: health, schemas, metadata and the tool listing."""

from __future__ import annotations

import typing
from typing import Any

from fastapi import APIRouter

from .environment import Action, Environment, Observation, State
from .sessions import SessionPool
from .tools import ToolSpec

__all__ = ["build_router"]


def build_router(name: str, env_class: type[Environment], action_cls: type[Action], observation_cls: type[Observation],
                 tools: dict[str, ToolSpec], pool: SessionPool, metadata: dict[str, Any]) -> APIRouter:
    """Routes that describe the served environment; none of them touches a session."""
    router = APIRouter()
    state_cls = _state_class(env_class)
    schema = {
        "action": action_cls.model_json_schema(),
        "observation": observation_cls.model_json_schema(),
        "state": state_cls.model_json_schema(),
    }
    tool_listing = [spec.schema() for spec in tools.values()]
    description = {
        "name": name,
        "description": (env_class.__doc__ or "").strip().split("\n\n")[0],
        "version": metadata.get("version"),
        "supports_concurrent_sessions": env_class.SUPPORTS_CONCURRENT_SESSIONS,
        "max_concurrent_envs": pool.max_sessions,
        "session_timeout_s": pool.idle_timeout_s,
        "tools": list(tools),
        **{key: value for key, value in metadata.items() if key != "version"},
    }

    @router.get("/health")
    async def health() -> dict[str, Any]:
        """Liveness and load: how many sessions are open and how many may be."""
        status = "shutting_down" if pool.shutting_down else "healthy"
        return {"status": status, "active_sessions": pool.active, "max_sessions": pool.max_sessions}

    @router.get("/schema")
    async def get_schema() -> dict[str, Any]:
        """JSON schemas of the action, observation and state."""
        return schema

    @router.get("/metadata")
    async def get_metadata() -> dict[str, Any]:
        """Name, description and serving limits of the environment."""
        return description

    @router.get("/tools")
    async def get_tools() -> dict[str, Any]:
        """The tools an agent may call, as function-calling JSON schemas."""
        return {"tools": tool_listing}

    return router


def _state_class(env_class: type[Environment]) -> type[State]:
    try:
        annotation = typing.get_type_hints(env_class.state.fget).get("return")
    except Exception:
        return State
    return annotation if isinstance(annotation, type) and issubclass(annotation, State) else State
