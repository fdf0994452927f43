"""An OpenEnv `MCPEnvironment`'s MCP tools as envkit tools: one `@tool` method per tool it lists.

Each method's signature, type hints and docstring are written from the tool's JSON schema, so envkit's
tool listing, `/mcp`, ORS, `/web` and `envkit train` describe and check it as any envkit tool; calling it
steps the environment with OpenEnv's `CallToolAction`, as OpenEnv's own MCP route does.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from ..tools import tool

__all__ = ["mcp_tool_methods"]

_HINTS: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list,
                          "object": dict}


def _hint(schema: dict[str, Any]) -> Any:
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


def _tool_method(name: str, description: str, schema: dict[str, Any], call_action: type) -> Callable[..., Any]:
    properties: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    hints: dict[str, Any] = {}
    lines = [description.strip().splitlines()[0] if description.strip() else f"The {name} tool.", "", "Args:"]
    for argument, property_schema in properties.items():
        hints[argument] = _hint(property_schema)
        default = inspect.Parameter.empty if argument in required else property_schema.get("default")
        parameters.append(inspect.Parameter(argument, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=hints[argument]))
        said = " ".join(str(property_schema.get("description") or property_schema.get("title") or argument).split())
        lines.append(f"    {argument}: {said}")

    def method(self: Any, **arguments: Any) -> Any:
        observation = self.openenv.step(call_action(tool_name=name, arguments=arguments))
        if observation.error is not None:
            raise RuntimeError(observation.error.message)
        result = observation.result
        data = getattr(result, "data", None)
        if data is not None:
            return data
        content = getattr(result, "content", None) or []
        return "\n".join(str(getattr(part, "text", part)) for part in content) if content else result

    method.__name__ = method.__qualname__ = name
    method.__doc__ = "\n".join(lines if properties else lines[:1])
    method.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    method.__annotations__ = hints
    return tool(method)


def mcp_tool_methods(env: Any) -> dict[str, Callable[..., Any]]:
    """One tool method per MCP tool `env` lists (none when `env` is not an MCP environment)."""
    if not hasattr(env, "mcp_server"):
        return {}
    from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction

    listing = env.step(ListToolsAction())
    return {one.name: _tool_method(one.name, one.description or "", one.input_schema or {}, CallToolAction)
            for one in listing.tools if one.name.isidentifier() and not one.name.startswith("_")}
