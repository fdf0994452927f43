"""From a served tool listing back to Python: type hints and Google-style docstrings.

TRL builds each tool's schema from a method's type hints and docstring with
`transformers.utils.get_json_schema`. To hand TRL a method per served tool, envkit turns the JSON
schema of every argument back into a type hint (`enum` → `Literal`, `array` → `list[...]`,
`nullable` → `Optional`) and writes a docstring that parses back to the same descriptions, then
checks that `get_json_schema` really reproduces the listing (`check_tool_schema`).
"""

from __future__ import annotations

import keyword
import re
from typing import Any, Literal, Optional, Union

from ..errors import ConfigurationError

__all__ = ["BindingError", "RESERVED_NAMES", "type_hint", "docstring", "check_tool_schema"]

#: Names TRL gives a meaning of its own on an environment class; a tool cannot use them.
RESERVED_NAMES = frozenset({"reset", "get_reward"})

_BASIC = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}
_ENUM_SUFFIX = re.compile(r"\(choices:\s*(.*?)\)\s*$", re.IGNORECASE)


class BindingError(ConfigurationError):
    """A served environment's tools cannot be bound to a trainer; the message names the tool and the fix."""


def type_hint(schema: dict[str, Any], where: str) -> Any:
    """The Python type hint whose `get_json_schema` rendering is `schema` (without its description)."""
    schema = {key: value for key, value in schema.items() if key != "description"}
    nullable = bool(schema.pop("nullable", False))
    hint = _hint(schema, where)
    return Optional[hint] if nullable else hint  # noqa: UP045 (Optional[...] of a runtime-built hint)


def _hint(schema: dict[str, Any], where: str) -> Any:
    if not schema:
        return Any
    if "enum" in schema:
        values = schema["enum"]
        if not values or not all(isinstance(value, (str, int, float, bool)) or value is None for value in values):
            raise BindingError(f"{where}: enum {values!r} must list strings, numbers or booleans")
        return Literal[tuple(values)]
    if "anyOf" in schema:
        return Union[tuple(type_hint(member, where) for member in schema["anyOf"])]  # noqa: UP007
    kind = schema.get("type")
    if isinstance(kind, list):
        return Union[tuple(_hint({"type": one}, where) for one in kind)]  # noqa: UP007
    if kind in _BASIC:
        return _BASIC[kind]
    if kind == "array":
        if "prefixItems" in schema:
            return tuple[tuple(type_hint(item, where) for item in schema["prefixItems"])]
        return list[type_hint(schema.get("items", {}), where)]
    if kind == "object":
        if "additionalProperties" in schema:
            return dict[str, type_hint(schema["additionalProperties"], where)]
        return dict
    raise BindingError(f"{where}: JSON schema {schema!r} has no Python type a model's tool call can use; tools take "
                       "strings, numbers, booleans, enums, and lists, dicts or optionals of those")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def docstring(description: str, arguments: dict[str, str], returns: str | None) -> str:
    """A Google-style docstring that `get_json_schema` parses back into exactly these texts."""
    lines = [description.strip(), ""]
    if arguments:
        lines.append("Args:")
        lines.extend(f"    {name}: {_one_line(text)}" for name, text in arguments.items())
    if returns:
        lines += ["", "Returns:", f"    {_one_line(returns)}"]
    return "\n".join(lines).rstrip() + "\n"


def check_name(name: str, where: str) -> None:
    """Tool and argument names become Python identifiers; refuse the ones that cannot."""
    if not name.isidentifier() or keyword.iskeyword(name):
        raise BindingError(f"{where}: {name!r} is not a Python identifier, so it cannot become a method or argument "
                           "name; rename it in the environment")


def _normalised(schema: Any) -> Any:
    """Parts that mean the same made equal: lists of JSON types and `required` are sets in meaning,
    `"items": {}` (a list of anything) is what a bare `"type": "array"` means, and an argument's `examples`
    (for `envkit validate` and other clients; `get_json_schema` writes none) change nothing a model sees."""
    if isinstance(schema, dict):
        out = {key: _normalised(value) for key, value in schema.items()
               if not (key == "items" and value == {}) and key != "examples"}
        for key in ("type", "required"):
            if isinstance(out.get(key), list):
                out[key] = sorted(out[key])
        return out
    if isinstance(schema, list):
        return [_normalised(item) for item in schema]
    return schema


def check_tool_schema(method: Any, listed: dict[str, Any]) -> None:
    """Raise `BindingError` unless `get_json_schema(method)` describes the tool exactly as the server lists it.

    This is the schema the model will see in its prompt; checking it here makes a tool the model could not call
    fail at start-up instead of at the first training step.
    """
    from transformers.utils import get_json_schema

    name = listed.get("name", "?")
    try:
        built = get_json_schema(method)["function"]
    except Exception as error:
        raise BindingError(f"tool {name!r}: transformers cannot build its schema ({type(error).__name__}: {error}); "
                           "check its type hints and docstring in the environment") from None
    for key in ("name", "description", "parameters"):
        if _normalised(built.get(key)) != _normalised(listed.get(key)):
            raise BindingError(f"tool {name!r}: the model would see {key} {built.get(key)!r} but the server lists "
                               f"{listed.get(key)!r}; " + _hint_for_mismatch(listed))
    if "return" in listed and _normalised(built.get("return")) != _normalised(listed["return"]):
        raise BindingError(f"tool {name!r}: return {built.get('return')!r} differs from the listed "
                           f"{listed['return']!r}")


def _hint_for_mismatch(listed: dict[str, Any]) -> str:
    for argument, schema in (listed.get("parameters") or {}).get("properties", {}).items():
        if _ENUM_SUFFIX.search(schema.get("description", "")):
            return (f"the description of {argument!r} ends in '(choices: ...)', which transformers reads as an enum; "
                    "reword it or type the argument as a Literal")
    return "simplify the tool's argument types or description in the environment"
