"""HTTP routes beside the WebSocket: health, schemas, metadata, the tool listing and metrics.

`Documents` builds the JSON documents once; the FastAPI router here serves them.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..core.access import AccessPolicy
from ..core.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from ..core.reset_arguments import ResetArguments
from ..core.sessions import SessionPool
from ..environment import Action, Environment, Observation, State
from ..tools import ToolSpec

__all__ = ["Documents", "build_router", "METRICS_CONTENT_TYPE", "environment_version"]


@dataclass(frozen=True)
class Documents:
    """What `/schema`, `/metadata` and `/tools` answer, and `/health` from the live pool."""

    pool: SessionPool
    schema: dict[str, Any]
    metadata: dict[str, Any]
    tools: dict[str, Any]
    #: Functions that amend the `/health` document in place (e.g. `envkit.scale.workers` adds every worker's load).
    health_views: list[Callable[[dict[str, Any]], None]] = field(default_factory=list)

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
            "version": metadata.get("version") or environment_version(env_class),
            "episode_length": env_class.EPISODE_LENGTH,
            "reward_range": list(env_class.REWARD_RANGE) if env_class.REWARD_RANGE is not None else None,
            "train_rewards": list(env_class.TRAIN_REWARDS),
            "reset_arguments": _reset_names(env_class),
            "supports_concurrent_sessions": env_class.SUPPORTS_CONCURRENT_SESSIONS,
            "max_concurrent_envs": pool.max_sessions,
            "session_timeout_s": pool.idle_timeout_s,
            "capacity_wait_s": pool.capacity_wait_s,
            "ping_interval_s": pool.ping_interval_s,
            "ping_timeout_s": pool.ping_timeout_s,
            "tools": list(tools),
            "metrics": [metric.describe() for metric in env_class.METRICS],
            "max_sessions_per_client": pool.max_sessions_per_client,
            "access": access.describe() if access is not None else None,
            **{key: value for key, value in metadata.items() if key != "version"},
        }
        return cls(pool, schema, description, {"tools": [spec.schema() for spec in tools.values()]})

    def health(self) -> dict[str, Any]:
        """Liveness and load: how many sessions are open and how many may be."""
        pool = self.pool
        status = "shutting_down" if pool.shutting_down else "healthy"
        document = {"status": status, "active_sessions": pool.active, "max_sessions": pool.max_sessions}
        for view in self.health_views:
            view(document)
        return document

    def metrics(self) -> str:
        """The server's counters in the Prometheus text format (served with `METRICS_CONTENT_TYPE`)."""
        return self.pool.metrics.render(self.pool.active, self.pool.max_sessions)


def build_router(documents: Documents,
                 other_tool_listing: Callable[[Request], dict[str, Any] | None] | None = None) -> APIRouter:
    """FastAPI routes serving `documents`.

    `other_tool_listing`: asked first at `GET /tools`; a listing it returns (another protocol's shape, for a
    request from that protocol's client) is the answer, None leaves the answer to envkit's listing.
    """
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
    async def get_tools(request: Request) -> dict[str, Any]:
        """The tools an agent may call, as function-calling JSON schemas."""
        if other_tool_listing is not None:
            listing = other_tool_listing(request)
            if listing is not None:
                return listing
        return documents.tools

    @router.get("/metrics", response_class=Response)
    async def get_metrics() -> Response:
        """Counters for Prometheus: sessions, refusals, bad client input, frames and their latency."""
        return Response(documents.metrics(), media_type=METRICS_CONTENT_TYPE)

    return router


def _state_class(env_class: type[Environment]) -> type[State]:
    try:
        annotation = typing.get_type_hints(env_class.state.fget).get("return")
    except Exception:
        return State
    return annotation if isinstance(annotation, type) and issubclass(annotation, State) else State


def environment_version(env_class: type[Environment]) -> str | None:
    """The version of the package defining `env_class`: `[project] version` of the `pyproject.toml` beside
    its top-level package (an env folder, or a `src/` layout), else its installed distribution's; or None."""
    package = env_class.__module__.partition(".")[0]
    try:
        source = Path(inspect.getfile(env_class)).resolve()
    except (TypeError, OSError):
        source = None
    if source is not None:
        container = source.parents[env_class.__module__.count(".") + (source.name == "__init__.py")]
        for folder in (container, container.parent) if container.name == "src" else (container,):
            version = _pyproject_version(folder / "pyproject.toml")
            if version:
                return version
    for distribution in _distributions().get(package, ()):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _pyproject_version(pyproject: Path) -> str | None:
    try:
        version = tomllib.loads(pyproject.read_text()).get("project", {}).get("version")
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return str(version) if version else None


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _reset_names(env_class: type[Environment]) -> list[str] | None:
    """The names a reset request may carry (`envkit.core.reset_arguments`); None: any name."""
    names = ResetArguments(env_class).names
    return None if names is None else sorted(names)
