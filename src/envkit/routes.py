"""HTTP routes beside the WebSocket: health, schemas, metadata and the tool listing.

`Documents` builds the JSON documents once; the FastAPI router here and the picows transport
(`picows_server`) both serve them.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter

from .access import AccessPolicy
from .environment import Action, Environment, Observation, State
from .sessions import SessionPool
from .tools import ToolSpec

__all__ = ["Documents", "build_router"]


@dataclass(frozen=True)
class Documents:
    """What `/schema`, `/metadata` and `/tools` answer, and `/health` from the live pool."""

    pool: SessionPool
    schema: dict[str, Any]
    metadata: dict[str, Any]
    tools: dict[str, Any]

    @classmethod
    def describe(cls, name: str, env_class: type[Environment], action_cls: type[Action],
                 observation_cls: type[Observation], tools: dict[str, ToolSpec], pool: SessionPool,
                 metadata: dict[str, Any], access: AccessPolicy | None = None) -> Documents:
        """The documents describing a served environment; none of them touches a session."""
        schema = {
            "action": action_cls.model_json_schema(),
            "observation": observation_cls.model_json_schema(),
            "state": _state_class(env_class).model_json_schema(),
        }
        description = {
            "name": name,
            "description": (env_class.__doc__ or "").strip().split("\n\n")[0],
            "version": metadata.get("version"),
            "supports_concurrent_sessions": env_class.SUPPORTS_CONCURRENT_SESSIONS,
            "max_concurrent_envs": pool.max_sessions,
            "session_timeout_s": pool.idle_timeout_s,
            "capacity_wait_s": pool.capacity_wait_s,
            "ping_interval_s": pool.ping_interval_s,
            "ping_timeout_s": pool.ping_timeout_s,
            "tools": list(tools),
            "max_sessions_per_client": pool.max_sessions_per_client,
            "access": access.describe() if access is not None else None,
            **{key: value for key, value in metadata.items() if key != "version"},
        }
        return cls(pool, schema, description, {"tools": [spec.schema() for spec in tools.values()]})

    def health(self) -> dict[str, Any]:
        """Liveness and load: how many sessions are open and how many may be."""
        pool = self.pool
        status = "shutting_down" if pool.shutting_down else "healthy"
        return {"status": status, "active_sessions": pool.active, "max_sessions": pool.max_sessions}


def build_router(documents: Documents) -> APIRouter:
    """FastAPI routes serving `documents`."""
    router = APIRouter()

    @router.get("/health")
    async def health() -> dict[str, Any]:
        """Liveness and load: how many sessions are open and how many may be."""
        return documents.health()

    @router.get("/schema")
    async def get_schema() -> dict[str, Any]:
        """JSON schemas of the action, observation and state."""
        return documents.schema

    @router.get("/metadata")
    async def get_metadata() -> dict[str, Any]:
        """Name, description and serving limits of the environment."""
        return documents.metadata

    @router.get("/tools")
    async def get_tools() -> dict[str, Any]:
        """The tools an agent may call, as function-calling JSON schemas."""
        return documents.tools

    return router


def _state_class(env_class: type[Environment]) -> type[State]:
    try:
        annotation = typing.get_type_hints(env_class.state.fget).get("return")
    except Exception:
        return State
    return annotation if isinstance(annotation, type) and issubclass(annotation, State) else State
