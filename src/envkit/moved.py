"""Old import paths of modules that moved when the package took its layered layout, and where they went.

`import envkit.serving` (say) still works: it loads `envkit.app.targets` under both names and warns once, with a
`DeprecationWarning` that names the new path. Installed by `import envkit`. Three old modules are packages now
(`envkit.app`, `envkit.client`, `envkit.publish`): names they had that the package does not export are found in
the module that holds them now (`moved_names`), with the same warning.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

__all__ = ["MOVED", "install", "moved_names"]

#: Old module path -> new module path.
MOVED = {
    "envkit.sessions": "envkit.core.sessions", "envkit.access": "envkit.core.access",
    "envkit.metrics": "envkit.core.metrics", "envkit.quiet_log": "envkit.core.quiet_log",
    "envkit.memory": "envkit.core.memory", "envkit.inline_answers": "envkit.core.inline_answers",
    "envkit.ws_handler": "envkit.surfaces.ws", "envkit.mcp": "envkit.surfaces.mcp", "envkit.ors": "envkit.surfaces.ors",
    "envkit.web": "envkit.surfaces.web", "envkit.routes": "envkit.surfaces.documents",
    "envkit.http_exchange": "envkit.surfaces.http_exchange",
    "envkit.serving": "envkit.app.targets",
    "envkit.server": "envkit.transport.uvicorn_server",
    "envkit.uvicorn_protocols": "envkit.transport.uvicorn_protocols",
    "envkit.listener": "envkit.transport.listener", "envkit.fast_paths": "envkit.transport.fast_paths",
    "envkit.transport_checks": "envkit.transport.fast_path_checks", "envkit.ws_frames": "envkit.transport.ws_frames",
    "envkit.http_at_once": "envkit.transport.http_at_once", "envkit.ports": "envkit.transport.ports",
    "envkit.workers": "envkit.scale.workers", "envkit.ray_serve": "envkit.scale.ray_serve",
    "envkit.registry": "envkit.scale.registry",
    "envkit.docker": "envkit.client.docker", "envkit.placement": "envkit.client.placement",
    "envkit.ors_client": "envkit.client.ors_client",
    "envkit.scaffold": "envkit.publish.scaffold", "envkit.validate": "envkit.publish.validate",
    "envkit.dockerfile": "envkit.publish.dockerfile",
    "envkit.train.binding": "envkit.play.binding", "envkit.train.schema": "envkit.play.schema",
    "envkit.train.data": "envkit.play.tasks", "envkit.train.tiny": "envkit.play.tiny",
    "envkit.train.model_check": "envkit.play.model_check", "envkit.train.embedded": "envkit.play.embedded",
    "envkit.evaluate.loop": "envkit.play.loop", "envkit.evaluate.model_player": "envkit.play.model_player",
    "envkit.evaluate.policy_player": "envkit.play.policy_player", "envkit.evaluate.games": "envkit.play.games",
    "envkit.evaluate.table": "envkit.play.table", "envkit.evaluate.models": "envkit.play.models",
}


def new_path(old: str) -> str | None:
    """Where the module `old` (or the package it is in) moved to, or None."""
    parts = old.split(".")
    for end in range(len(parts), 1, -1):
        moved = MOVED.get(".".join(parts[:end]))
        if moved is not None:
            return ".".join([moved, *parts[end:]])
    return None


class _MovedModule(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.new}; import it from there", DeprecationWarning, stacklevel=2)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module under its new name is loaded already."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        new = new_path(name) if name.startswith("envkit.") else None   # asked of every import in the process
        return None if new is None else importlib.util.spec_from_loader(name, _MovedModule(new))


def install() -> None:
    """Let the old paths load (once per process)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())  # before the path finder, which would load a second copy


def moved_names(package: str, module: str) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that finds the names its old module had in `module`, with a warning."""

    def __getattr__(name: str) -> Any:
        holder = importlib.import_module(module)
        if name.startswith("__") or not hasattr(holder, name):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        warnings.warn(f"{package}.{name} moved to {module}.{name}; import it from there", DeprecationWarning,
                      stacklevel=2)
        return getattr(holder, name)

    return __getattr__
