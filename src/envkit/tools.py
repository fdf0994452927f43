"""Tools: the methods of an environment that an LLM agent may call.

A tool is an `Environment` method marked with `@tool`, with type hints on every argument and a
Google-style docstring that describes the tool and each argument. From that one definition envkit
builds a JSON schema in the function-calling format that chat templates and
`transformers.utils.get_json_schema` use, validates call arguments, and publishes the listing at
`GET /tools`, from which trainers and other front ends are generated. An argument may carry examples of
legal values, `expression: Annotated[str, Field(examples=["2 + 3"])]`: they travel in its schema, and
`envkit validate URL` makes its test call from them.

A tool returns a string (shown to the agent as is), an `Observation` (shown through
`Observation.as_text()`, with its reward and done flag reported to the caller), or another JSON
value such as a dict (shown as JSON; MCP clients also get the value itself).

A service tool, `@tool(service=True)`, is for the program that drives the environment, not for the agent in
it (a Harbor task folder's `run_rollout`): it is left out of every listing an agent reads (`GET /tools`, MCP,
ORS), it runs on a session that has not been reset, and it is called by name with OpenEnv's `call_tool` step
on `/ws` (`tool_specs(env_class, service=True)` lists them).
"""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Union

from pydantic import BaseModel, Field, Strict, create_model

from .errors import ToolDefinitionError
from .model_codec import validator_for

__all__ = ["tool", "ToolSpec", "tool_specs", "parse_google_docstring"]

_TOOL_MARK = "__envkit_tool__"
#: The mark's values: a tool for the agent, a service tool.
AGENT, SERVICE = "agent", "service"
_JSON_TYPES: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object"}
_STRICT: dict[type, Any] = {kind: typing.Annotated[kind, Strict()] for kind in (str, int, float, bool)}
_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|Notes?)\s*:\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")


def tool(method: Callable[..., Any] | None = None, *, service: bool = False) -> Any:
    """Mark an `Environment` method as a tool an LLM agent may call (`@tool`), or, with `@tool(service=True)`,
    as a service tool for the program driving the environment (see the module's docstring)."""
    def mark(function: Callable[..., Any]) -> Callable[..., Any]:
        setattr(function, _TOOL_MARK, SERVICE if service else AGENT)
        return function

    return mark if method is None else mark(method)


@dataclass(frozen=True)
class DocString:
    """The parts of a Google-style docstring that a tool schema needs."""

    description: str
    args: dict[str, str] = field(default_factory=dict)
    returns: str | None = None


def parse_google_docstring(doc: str | None) -> DocString:
    """Split a Google-style docstring into its summary, `Args:` entries and `Returns:` text."""
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    args: dict[str, list[str]] = {}
    returns: list[str] = []
    section, current, arg_indent = None, None, None
    for line in lines:
        header = _SECTION.match(line)
        if header:
            section, current, arg_indent = header.group(1).lower(), None, None
            continue
        if section is None:
            summary.append(line)
        elif section in ("args", "arguments", "parameters"):
            indent = len(line) - len(line.lstrip())
            match = _ARG_LINE.match(line)
            if match and (arg_indent is None or indent <= arg_indent):
                arg_indent = indent
                current = match.group(1).lstrip("*")
                args[current] = [match.group(3).strip()]
            elif current is not None and line.strip():
                args[current].append(line.strip())
        elif section in ("returns", "return"):
            returns.append(line.strip())
    return DocString(
        description="\n".join(line.rstrip() for line in summary).strip(),
        args={name: " ".join(part for part in text if part) for name, text in args.items()},
        returns=" ".join(part for part in returns if part) or None,
    )


def json_schema_for(hint: Any, where: str) -> dict[str, Any]:
    """The JSON schema of one type hint, in the shape `transformers.utils.get_json_schema` writes."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    if hint is Any:
        return {}
    if hint is type(None):
        return {"type": "null"}
    if origin is Literal:
        kinds = sorted({_JSON_TYPES[type(value)] for value in args})
        return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": list(args)}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return json_schema_for(Literal[tuple(member.value for member in hint)], where)
    if origin in (Union, types.UnionType):
        members = [arg for arg in args if arg is not type(None)]
        if len(members) == 1:
            schema = json_schema_for(members[0], where)
        else:
            member_schemas = [json_schema_for(member, where) for member in members]
            if all(set(one) == {"type"} and isinstance(one["type"], str) for one in member_schemas):
                schema = {"type": sorted({one["type"] for one in member_schemas})}
            else:
                schema = {"anyOf": member_schemas}
        if len(members) < len(args):
            schema["nullable"] = True
        return schema
    if origin in (list, set, frozenset, typing.Sequence) or hint in (list, set):
        schema: dict[str, Any] = {"type": "array"}
        if args:
            schema["items"] = json_schema_for(args[0], where)
        return schema
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": json_schema_for(args[0], where)}
        return {"type": "array", "prefixItems": [json_schema_for(arg, where) for arg in args]}
    if origin is dict:
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = json_schema_for(args[1], where)
        return schema
    raise ToolDefinitionError(f"{where}: type {hint!r} has no JSON schema; use str, int, float, bool, Literal, "
                              "an Enum, or a list/dict/Optional of those")


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, description, argument schema and the validator for its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]
    returns: str | None
    arguments_model: type[BaseModel]
    _validate: Callable[[Any], BaseModel] = field(init=False, repr=False, compare=False)
    #: (argument name, the arguments model's field for it), in the method's order.
    _fields: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_validate", validator_for(self.arguments_model))
        object.__setattr__(self, "_fields", tuple((name, f"arg{index}")
                                                  for index, name in enumerate(self.parameters["properties"])))

    def schema(self) -> dict[str, Any]:
        """The function-calling schema, `{"type": "function", "function": {...}}`."""
        returns: dict[str, Any] = {"type": "string"}   # the agent always reads a tool's result as text
        if self.returns:
            returns["description"] = self.returns
        function = {"name": self.name, "description": self.description, "parameters": self.parameters, "return": returns}
        return {"type": "function", "function": function}

    def validate_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Check and coerce call arguments; raises `pydantic.ValidationError` when they are wrong.

        The model's fields are named by position (`arg0`, ...) with the argument names as aliases, so
        that any name a Python method takes (`model_config`, `_private`, `json`) reaches the tool.
        """
        values = self._validate(arguments).__dict__
        return {name: values[model_field] for name, model_field in self._fields}


def _spec_from_method(owner: type, name: str, method: Callable[..., Any]) -> ToolSpec:
    where = f"{owner.__module__}.{owner.__qualname__}.{name}"
    doc = parse_google_docstring(method.__doc__)
    if not doc.description:
        raise ToolDefinitionError(f"{where}: tool has no docstring; add a one-line description and an `Args:` entry "
                                  "for every argument (Google style)")
    try:
        hints = typing.get_type_hints(method, include_extras=True)
    except Exception as error:
        raise ToolDefinitionError(f"{where}: cannot resolve type hints ({error})") from error
    properties: dict[str, Any] = {}
    required: list[str] = []
    fields: dict[str, Any] = {}
    for param in list(inspect.signature(method).parameters.values())[1:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(f"{where}: *args/**kwargs cannot be described to a model; name every argument")
        if param.name not in hints:
            raise ToolDefinitionError(f"{where}: argument `{param.name}` has no type hint; add one (e.g. `{param.name}: str`)")
        if param.name not in doc.args:
            raise ToolDefinitionError(f"{where}: argument `{param.name}` is not described; add `{param.name}: ...` "
                                      "under `Args:` in the docstring")
        hint, examples = _examples(hints[param.name])
        schema = json_schema_for(hint, f"{where}({param.name})")
        schema["description"] = doc.args[param.name]
        if examples:
            schema["examples"] = examples
        properties[param.name] = schema
        if param.default is param.empty:
            required.append(param.name)
        default = ... if param.default is param.empty else param.default
        fields[f"arg{len(fields)}"] = (strict_hint(hints[param.name]), Field(default, alias=param.name))
    stray = sorted(set(doc.args) - set(properties))
    if stray:
        raise ToolDefinitionError(f"{where}: the docstring describes {', '.join(f'`{name}`' for name in stray)} under "
                                  f"`Args:`, which the tool does not take (it takes {', '.join(properties) or 'none'}); "
                                  "rename or remove the line")
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    arguments_model = create_model(f"{owner.__name__}_{name}_arguments", __config__={"extra": "forbid"}, **fields)
    return ToolSpec(name, doc.description, parameters, doc.returns, arguments_model)


def strict_hint(hint: Any) -> Any:
    """`hint` with its strings, numbers and booleans made strict, so a call's arguments must have the JSON types
    the schema names: `"120"` is no number and `true` no number or string (an integer does pass for a number).
    Every surface validates tool arguments through this; lists, dicts, optionals and `Annotated` keep their shape."""
    if hint in _STRICT:
        return _STRICT[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return typing.Annotated[(strict_hint(hint.__origin__), *hint.__metadata__)]
    if origin in (Union, types.UnionType):
        return Union[tuple(strict_hint(arg) for arg in args)]  # noqa: UP007 (a Union built at run time)
    if origin in (list, dict, set, frozenset, tuple) and args:
        return origin[tuple(arg if arg is Ellipsis else strict_hint(arg) for arg in args)]
    return hint


def _examples(hint: Any) -> tuple[Any, list[Any]]:
    """The type of an `Annotated[type, Field(examples=[...])]` hint and its examples (the hint itself and none
    otherwise). The examples reach the schema, where `envkit validate` takes a legal call from them."""
    if typing.get_origin(hint) is not typing.Annotated:
        return hint, []
    examples = [example for extra in hint.__metadata__ for example in (getattr(extra, "examples", None) or [])]
    return hint.__origin__, examples


def tool_specs(env_class: type, *, service: bool = False) -> dict[str, ToolSpec]:
    """Every `@tool` method of `env_class` (inherited ones too), checked and described, by name; with `service`,
    its `@tool(service=True)` methods instead.

    Raises `ToolDefinitionError` naming the method and the fix when a tool cannot be described.
    """
    specs: dict[str, ToolSpec] = {}
    for name in dir(env_class):
        method = inspect.getattr_static(env_class, name, None)
        if callable(method) and getattr(method, _TOOL_MARK, None) == (SERVICE if service else AGENT):
            if name in ("reset", "step", "state", "close") or name.startswith("_"):
                raise ToolDefinitionError(f"{env_class.__qualname__}.{name}: `{name}` cannot be a tool; rename it")
            specs[name] = _spec_from_method(env_class, name, method)
    return specs

