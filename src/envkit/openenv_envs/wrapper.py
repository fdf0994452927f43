"""An OpenEnv `Environment` (or `MCPEnvironment`) class served as an envkit `Environment`, unchanged.

`wrap_openenv(factory, Action, Observation)` builds an envkit class around it:

- its Action and Observation models are subclassed once with envkit's, so a validated action *is* the
  OpenEnv action its `step` expects and the observation it returns is sent as it is (one shallow copy);
- `reset`/`step` call OpenEnv's, and `reset_async`/`step_async` exist where the class overrides them
  (the session pool then awaits them, as OpenEnv's server does); `state`, `close`,
  `SUPPORTS_CONCURRENT_SESSIONS` and `get_metadata()` carry over;
- an `MCPEnvironment`'s tools become envkit tools (`tools.mcp_tool_methods`);
- its rubric (`self.rubric`, OpenEnv's classes) is read after every step: each named leaf becomes a reward
  component in `metadata["reward_components"]` and an evaluation column (`METRICS`).
"""

from __future__ import annotations

import inspect
import types
from typing import Any, Callable

from ..environment import Action, Environment, Observation
from ..rubrics import component_names, components, report_components, rubric_metrics
from .tools import mcp_tool_methods

__all__ = ["wrap_openenv", "openenv_metadata"]


def _mirror(model: type, base: type, cache: dict[type, type]) -> type:
    """`model` (an OpenEnv pydantic model) subclassed with envkit's `base`, once per model."""
    mirrored = cache.get(model)
    if mirrored is None:
        mirrored = cache[model] = type(model.__name__, (model, base), {"__module__": model.__module__,
                                                                         "__doc__": model.__doc__})
    return mirrored


_ACTIONS: dict[type, type] = {}
_OBSERVATIONS: dict[type, type] = {}


def _overrides(openenv_class: type, name: str) -> bool:
    """Whether `openenv_class` defines `name` below OpenEnv's own `Environment` base."""
    for klass in openenv_class.__mro__:
        if name in vars(klass):
            return not (klass.__name__ == "Environment" and klass.__module__.startswith("openenv."))
    return False


def openenv_metadata(env: Any) -> dict[str, Any]:
    """What an OpenEnv environment says about itself (`get_metadata()`), as `/metadata` fields."""
    getter = getattr(env, "get_metadata", None)
    if getter is None:
        return {}
    found = getter()
    data = found.model_dump(exclude_none=True) if hasattr(found, "model_dump") else dict(found or {})
    data.pop("name", None)
    return data


def wrap_openenv(factory: Callable[[], Any], action_cls: type, observation_cls: type, *,
                 name: str | None = None) -> tuple[type[Environment], type[Action], type[Observation], dict[str, Any]]:
    """The envkit class serving OpenEnv environments made by `factory`, its models, and its `/metadata` fields.

    One instance is built here to read its tools, rubric and metadata, and closed.
    """
    openenv_class = factory if isinstance(factory, type) else None
    probe = factory()
    try:
        openenv_class = openenv_class or type(probe)
        tools = mcp_tool_methods(probe)
        rubric = getattr(probe, "rubric", None)
        metadata = openenv_metadata(probe)
        leaves = component_names(rubric) if rubric is not None else []
        metrics = rubric_metrics(rubric) if rubric is not None else ()
    finally:
        probe.close()
    envkit_action = _mirror(action_cls, Action, _ACTIONS)
    envkit_observation = _mirror(observation_cls, Observation, _OBSERVATIONS)
    namespace: dict[str, Any] = {
        "__doc__": openenv_class.__doc__, "__module__": openenv_class.__module__,
        "SUPPORTS_CONCURRENT_SESSIONS": bool(getattr(openenv_class, "SUPPORTS_CONCURRENT_SESSIONS", False)),
        "METRICS": metrics, "OPENENV_CLASS": openenv_class, "REWARD_COMPONENTS": tuple(leaves),
        **tools, **_methods(factory, envkit_observation, openenv_class),
    }
    served = types.new_class(name or openenv_class.__name__, (Environment[envkit_action, envkit_observation, Any],),
                             exec_body=lambda body: body.update(namespace))
    return served, envkit_action, envkit_observation, metadata


def _methods(factory: Callable[[], Any], observation_cls: type, openenv_class: type) -> dict[str, Any]:
    """reset, step, state, close and episode_metrics over the wrapped instance (`self.openenv`)."""

    def received(self: Any, observation: Any) -> Any:
        rubric = getattr(self.openenv, "rubric", None)
        served = observation_cls.model_construct(_fields_set=observation.model_fields_set, **observation.__dict__)
        if rubric is not None:
            report_components(served, rubric)
        return served

    def __init__(self: Any) -> None:
        self.openenv = factory()

    def reset(self: Any, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Any:
        return received(self, self.openenv.reset(seed=seed, episode_id=episode_id, **kwargs))

    def step(self: Any, action: Any) -> Any:
        return received(self, self.openenv.step(action))

    async def reset_async(self: Any, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Any:
        return received(self, await self.openenv.reset_async(seed=seed, episode_id=episode_id, **kwargs))

    async def step_async(self: Any, action: Any) -> Any:
        return received(self, await self.openenv.step_async(action))

    def state(self: Any) -> Any:
        return self.openenv.state

    def close(self: Any) -> None:
        self.openenv.close()

    def episode_metrics(self: Any) -> dict[str, float]:
        rubric = getattr(self.openenv, "rubric", None)
        return components(rubric) if rubric is not None else {}

    signature = inspect.signature(openenv_class.reset)
    reset.__signature__ = signature  # type: ignore[attr-defined]
    methods: dict[str, Any] = {"__init__": __init__, "reset": reset, "step": step, "state": property(state),
                               "close": close, "episode_metrics": episode_metrics}
    if _overrides(openenv_class, "reset_async"):
        reset_async.__signature__ = inspect.signature(openenv_class.reset_async)  # type: ignore[attr-defined]
        methods["reset_async"] = reset_async
    if _overrides(openenv_class, "step_async"):
        methods["step_async"] = step_async
    return methods
