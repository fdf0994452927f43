"""Models' compiled validators and serializers, looked up once per class for the per-frame path.

`Model.model_validate(data)` and `model.model_dump()` wrap pydantic's compiled validator and
serializer in Python-level keyword handling that costs about as much again as the work itself for
a small action or observation. The server calls the compiled parts directly: the same checks, the
same errors and the same output, decided once per class (a class that overrides `model_validate` or
`model_dump` keeps its own method).
"""

from __future__ import annotations

from typing import Any, Callable

from pydantic import BaseModel

__all__ = ["validator_for", "dump"]

#: Classes dumped so far and how; bounded, in case an environment builds classes on the fly.
_DUMPERS: dict[type[BaseModel], Callable[[BaseModel], dict[str, Any]]] = {}
_MAX_DUMPERS = 1024


def validator_for(model: type[BaseModel]) -> Callable[[Any], Any]:
    """A callable doing what `model.model_validate` does (same result, same `ValidationError`s)."""
    if not model.__pydantic_complete__:
        model.model_rebuild()
    if getattr(model.model_validate, "__func__", None) is not BaseModel.model_validate.__func__:
        return model.model_validate
    return model.__pydantic_validator__.validate_python


def dump(model: BaseModel) -> dict[str, Any]:
    """`model.model_dump()`, through the class's compiled serializer."""
    cls = type(model)
    dumper = _DUMPERS.get(cls)
    if dumper is None:
        dumper = _dumper_for(cls)
        if len(_DUMPERS) < _MAX_DUMPERS:
            _DUMPERS[cls] = dumper
    return dumper(model)


def _dumper_for(cls: type[BaseModel]) -> Callable[[BaseModel], dict[str, Any]]:
    if cls.model_dump is not BaseModel.model_dump or not cls.__pydantic_complete__:
        return cls.model_dump
    return cls.__pydantic_serializer__.to_python
