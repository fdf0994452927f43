"""An OpenEnv environment's moves as envkit tools.

An `MCPEnvironment` gets one `@tool` method per MCP tool it lists; calling it steps the environment with
OpenEnv's `CallToolAction`, as OpenEnv's own MCP route does. Any other environment gets one tool, `act`,
whose arguments are its Action's fields: calling it steps the environment with that action and answers the
observation (its reward and done with it). Each method's signature, type hints and docstring are written from
a JSON schema, so envkit's tool listing, `/mcp`, ORS, `/web`, `envkit eval` and `envkit train` describe and
check it as any envkit tool.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Literal

from ..tools import tool

__all__ = ["mcp_tool_methods", "action_tool_method", "ACT"]

#: The tool of an environment that takes actions rather than MCP tool calls.
ACT = "act"

_HINTS: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list,
                          "object": dict}


def _hint(schema: dict[str, Any]) -> Any:
    if schema.get("enum"):
        return Literal[tuple(schema["enum"])]
    kind = schema.get("type")
    if isinstance(kind, list):
        members = [_HINTS.get(one, Any) for one in kind if one != "null"]
        hint = members[0] if len(members) == 1 else Any
        return hint | None if "null" in kind and hint is not Any else hint
    if kind is None and "anyOf" in schema:
        members = [one for one in schema["anyOf"] if one.get("type") != "null"]
        hint = _hint(members[0]) if len(members) == 1 else Any
        return hint | None if len(members) < len(schema["anyOf"]) and hint is not Any else hint
    return _HINTS.get(kind, Any)


def _inlined(schema: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """`schema` with a `$ref` (directly or as the one member of `allOf`) replaced by its definition."""
    reference = schema.get("$ref") or next((one.get("$ref") for one in schema.get("allOf", ())[:1]), None)
    if isinstance(reference, str) and reference.startswith("#/$defs/"):
        return {**definitions.get(reference.rpartition("/")[2], {}), **{key: value for key, value in schema.items()
                                                                          if key not in ("$ref", "allOf")}}
    return schema


def _described(name: str, description: str, schema: dict[str, Any], body: Callable[..., Any]) -> Callable[..., Any]:
    """`body(self, **arguments)` as a `@tool` named `name`, its signature and docstring from `schema`."""
    properties: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    hints: dict[str, Any] = {}
    lines = [description.strip().splitlines()[0] if description.strip() else f"The {name} tool.", "", "Args:"]
    for argument, property_schema in properties.items():
        property_schema = _inlined(property_schema, schema.get("$defs") or {})
        hints[argument] = _hint(property_schema)
        default = inspect.Parameter.empty
        if argument not in required:   # left out, the model's own default applies: None stands for that
            hints[argument], default = hints[argument] | None, None
        parameters.append(inspect.Parameter(argument, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=hints[argument]))
        said = " ".join(str(property_schema.get("description") or property_schema.get("title") or argument).split())
        lines.append(f"    {argument}: {said}")
    body = _without_unset(body)
    body.__name__ = body.__qualname__ = name
    body.__doc__ = "\n".join(lines if properties else lines[:1])
    body.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    body.__annotations__ = hints
    return tool(body)


def _without_unset(body: Callable[..., Any]) -> Callable[..., Any]:
    """`body`, given only the arguments the caller set (not None)."""
    if inspect.iscoroutinefunction(body):
        async def given_async(self: Any, **arguments: Any) -> Any:
            return await body(self, **{name: value for name, value in arguments.items() if value is not None})

        return given_async

    def given(self: Any, **arguments: Any) -> Any:
        return body(self, **{name: value for name, value in arguments.items() if value is not None})

    return given


def _mcp_result(observation: Any) -> Any:
    """What an MCP tool call answered: its value (`data`), else its text content."""
    if observation.error is not None:
        raise RuntimeError(observation.error.message)
    result = observation.result
    data = getattr(result, "data", None)
    if data is not None:
        return data
    content = getattr(result, "content", None) or []
    return "\n".join(str(getattr(part, "text", part)) for part in content) if content else result


def _mcp_tool_method(name: str, description: str, schema: dict[str, Any], call_action: type,
                     asynchronous: bool) -> Callable[..., Any]:
    if asynchronous:
        async def call_async(self: Any, **arguments: Any) -> Any:
            return _mcp_result(await self.openenv.step_async(call_action(tool_name=name, arguments=arguments)))

        return _described(name, description, schema, call_async)

    def call(self: Any, **arguments: Any) -> Any:
        return _mcp_result(self.openenv.step(call_action(tool_name=name, arguments=arguments)))

    return _described(name, description, schema, call)


def action_tool_method(action_cls: type, asynchronous: bool) -> Callable[..., Any]:
    """The `act` tool: one step with an action built from the tool's arguments (the Action's fields)."""
    schema = action_cls.model_json_schema()
    schema["properties"] = {name: value for name, value in (schema.get("properties") or {}).items()
                            if name != "metadata"}
    described = (action_cls.__doc__ or "").strip()
    description = f"Take one action in the environment: {described}" if described else "Take one action."
    if asynchronous:
        async def act_async(self: Any, **arguments: Any) -> Any:
            return await self.step_async(action_cls.model_validate(arguments))

        return _described(ACT, description, schema, act_async)

    def act(self: Any, **arguments: Any) -> Any:
        return self.step(action_cls.model_validate(arguments))

    return _described(ACT, description, schema, act)


def mcp_tool_methods(env: Any, asynchronous: bool) -> dict[str, Callable[..., Any]]:
    """One tool method per MCP tool `env` lists (none when `env` is not an MCP environment); `asynchronous`:
    they call `step_async`."""
    if not hasattr(env, "mcp_server"):
        return {}
    from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction

    listing = env.step(ListToolsAction())
    return {one.name: _mcp_tool_method(one.name, one.description or "", one.input_schema or {}, CallToolAction,
                                       asynchronous)
            for one in listing.tools if one.name.isidentifier() and not one.name.startswith("_")}
