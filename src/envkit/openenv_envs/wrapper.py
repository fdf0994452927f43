"""An OpenEnv `Environment` (or `MCPEnvironment`) class served as an envkit `Environment`, unchanged.

`wrap_openenv(factory, Action, Observation)` builds an envkit class around it:

- its Action and Observation models are subclassed once with envkit's, so a validated action *is* the
  OpenEnv action its `step` expects and the observation it returns is sent as it is (one shallow copy);
- `reset`/`step` call OpenEnv's, and `reset_async`/`step_async` exist where the class overrides them
  (the session pool then awaits them, as OpenEnv's server does); `state`, `close`,
  `SUPPORTS_CONCURRENT_SESSIONS` and `get_metadata()` carry over (and envkit's `RUN_INLINE`, which OpenEnv
  ignores, where the class sets it: its sync steps then run on the event loop instead of a worker thread);
- an `MCPEnvironment`'s tools become envkit tools (`tools.mcp_tool_methods`); any other environment gets one
  tool, `act`, taking its Action's fields (`tools.action_tool_method`), so agents, `eval` and `train` can play it;
- it gets seeded task splits (`SEEDED_TASKS`: train seeds 0-999, test seeds 1000-1099);
- its rubric (`self.rubric`, OpenEnv's classes) is read after every step: each named leaf becomes a reward
  component in `metadata["reward_components"]` and an evaluation column (`METRICS`).
"""

from __future__ import annotations

import inspect
import types
from typing import Any, Callable

from ..environment import Action, Environment, Observation
from ..rubrics import component_names, components, report_components, rubric_metrics
from .tools import ACT, action_tool_method, mcp_tool_methods

__all__ = ["wrap_openenv", "openenv_metadata", "SEEDED_TASKS"]


def _mirror(model: type, base: type, cache: dict[type, type]) -> type:
    """`model` (an OpenEnv pydantic model) subclassed with envkit's `base`, once per model."""
    mirrored = cache.get(model)
    if mirrored is None:
        mirrored = cache[model] = type(model.__name__, (model, base), {"__module__": model.__module__,
                                                                         "__doc__": model.__doc__})
    return mirrored


#: OpenEnv environments list no tasks; envkit gives them seeded splits, so `eval`, `train` and ORS have episodes to
#: play (a reset that takes no seed gets none, as under OpenEnv's server).
SEEDED_TASKS = {"train": [{"seed": seed} for seed in range(1000)],
                "test": [{"seed": seed} for seed in range(1000, 1100)]}
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
        asynchronous = _overrides(openenv_class, "step_async")
        tools = mcp_tool_methods(probe, asynchronous)
        rubric = getattr(probe, "rubric", None)
        metadata = openenv_metadata(probe)
        leaves = component_names(rubric) if rubric is not None else []
        metrics = rubric_metrics(rubric) if rubric is not None else ()
    finally:
        probe.close()
    if leaves:
        metadata["rubric_components"] = leaves   # `envkit train` logs each as a metric
    envkit_action = _mirror(action_cls, Action, _ACTIONS)
    envkit_observation = _mirror(observation_cls, Observation, _OBSERVATIONS)
    if not tools and "type" not in envkit_action.model_fields:
        tools = {ACT: action_tool_method(envkit_action, asynchronous)}
    namespace: dict[str, Any] = {
        "__doc__": openenv_class.__doc__, "__module__": openenv_class.__module__,
        "SUPPORTS_CONCURRENT_SESSIONS": bool(getattr(openenv_class, "SUPPORTS_CONCURRENT_SESSIONS", False)),
        "RUN_INLINE": bool(getattr(openenv_class, "RUN_INLINE", False)),
        "METRICS": metrics, "TASKS": SEEDED_TASKS,
        **tools, **_methods(factory, openenv_class),
    }
    served = types.new_class(name or openenv_class.__name__, (Environment[envkit_action, envkit_observation, Any],),
                             exec_body=lambda body: body.update(namespace))
    return served, envkit_action, envkit_observation, metadata


def _accepted(method: Callable[..., Any]) -> Callable[..., dict[str, Any]]:
    """The keyword arguments `method` takes, of those given (all with `**kwargs`), as OpenEnv's server passes them:
    a `reset(self)` gets no seed."""
    parameters = list(inspect.signature(method).parameters.values())[1:]
    if any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters):
        return lambda **given: given
    names = {parameter.name for parameter in parameters}
    return lambda **given: {name: value for name, value in given.items() if name in names}


def _methods(factory: Callable[[], Any], openenv_class: type) -> dict[str, Any]:
    """reset, step, state, close and episode_metrics over the wrapped instance (`self.openenv`)."""

    def received(self: Any, observation: Any) -> Any:
        rubric = getattr(self.openenv, "rubric", None)
        served_cls = _mirror(type(observation), Observation, _OBSERVATIONS)   # the class it returned, as OpenEnv sends
        served = served_cls.model_construct(_fields_set=observation.model_fields_set, **observation.__dict__)
        if rubric is not None:
            report_components(served, rubric)
        return served

    def __init__(self: Any) -> None:
        self.openenv = factory()

    def reset(self: Any, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Any:
        return received(self, self.openenv.reset(**takes_sync(seed=seed, episode_id=episode_id, **kwargs)))

    def step(self: Any, action: Any) -> Any:
        return received(self, self.openenv.step(action))

    async def reset_async(self: Any, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Any:
        return received(self, await self.openenv.reset_async(**takes_async(seed=seed, episode_id=episode_id, **kwargs)))

    async def step_async(self: Any, action: Any) -> Any:
        return received(self, await self.openenv.step_async(action))

    def state(self: Any) -> Any:
        return self.openenv.state

    def close(self: Any) -> None:
        self.openenv.close()

    def episode_metrics(self: Any) -> dict[str, float]:
        rubric = getattr(self.openenv, "rubric", None)
        return components(rubric) if rubric is not None else {}

    takes_sync, takes_async = _accepted(openenv_class.reset), _accepted(openenv_class.reset_async)
    methods: dict[str, Any] = {"__init__": __init__, "reset": reset, "step": step, "state": property(state),
                               "close": close, "episode_metrics": episode_metrics}
    if _overrides(openenv_class, "reset_async"):
        methods["reset_async"] = reset_async
    if _overrides(openenv_class, "step_async"):
        methods["step_async"] = step_async
    return methods
