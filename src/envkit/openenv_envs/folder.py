"""Reading what an OpenEnv environment folder serves, and finding OpenEnv environment classes.

An OpenEnv folder holds `openenv.yaml` (its `app:` names the app, `server.app:app` by default) and
`server/app.py`, which calls OpenEnv's `create_app(EnvClass, Action, Observation, env_name=...)`. The folder
goes on `sys.path` (so its `from models import ...` fallback imports work), and so does its parent where the
folder is a package (its `from ..models import ...` imports work then, the app imported as `<folder>.server.app`);
the app module is imported
with that `create_app` recording its arguments: the environment factory and its models come from the
folder's own code, unchanged.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigurationError

__all__ = ["OpenEnvApp", "is_openenv_folder", "is_openenv_class", "read_openenv_folder"]

logger = logging.getLogger("envkit.openenv")
#: Where OpenEnv's `create_app` lives; an app module imports it from one of these.
_CREATE_APP_HOMES = ("openenv.core.env_server.http_server", "openenv.core.env_server", "openenv.core")


@dataclass
class OpenEnvApp:
    """What a folder's app serves: the environment factory (usually its class), its models and name."""

    factory: Callable[[], Any]
    action_cls: type
    observation_cls: type
    name: str
    max_concurrent_envs: int | None = None


def is_openenv_folder(folder: Path) -> bool:
    """Whether `folder` is an OpenEnv environment folder: `openenv.yaml`, or `server/app.py` (some have no yaml)."""
    return (folder / "openenv.yaml").is_file() or (folder / "server" / "app.py").is_file()


def is_openenv_class(value: Any) -> bool:
    """Whether `value` is a subclass of OpenEnv's `Environment` (checked without importing openenv)."""
    return isinstance(value, type) and any(klass.__name__ == "Environment" and klass.__module__.startswith("openenv.")
                                           for klass in value.__mro__)


def _app_spec(folder: Path) -> str:
    import yaml

    if not (folder / "openenv.yaml").is_file():
        return "server.app:app"
    try:
        manifest = yaml.safe_load((folder / "openenv.yaml").read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigurationError(f"{folder / 'openenv.yaml'}: invalid YAML ({error})") from None
    app = manifest.get("app", "server.app:app") if isinstance(manifest, dict) else "server.app:app"
    return str(app)


@contextmanager
def _recording(calls: list[OpenEnvApp]) -> Iterator[None]:
    """OpenEnv's `create_app`, wherever an app imports it from, recording each call's arguments."""
    try:
        homes = [importlib.import_module(home) for home in _CREATE_APP_HOMES]
    except ImportError as error:
        raise ConfigurationError(f"serving an OpenEnv folder needs the openenv package ({error}); install envkit "
                                 "into the environment's own venv, where openenv is installed "
                                 "(docs/environments.md#openenv-environments)") from None
    originals = {home: getattr(home, "create_app", None) for home in homes}
    original = originals[homes[0]]
    if original is None:
        logger.warning("openenv %s has no create_app in %s; cannot read OpenEnv folders with it",
                       getattr(sys.modules.get("openenv"), "__version__", "?"), _CREATE_APP_HOMES[0])
        raise ConfigurationError("this openenv release has no openenv.core.env_server.http_server.create_app; "
                                 "serve the environment as module:Class instead")

    def create_app(env: Any, action_cls: type, observation_cls: type, *args: Any, **kwargs: Any) -> Any:
        calls.append(OpenEnvApp(env, action_cls, observation_cls, str(kwargs.get("env_name") or ""),
                                kwargs.get("max_concurrent_envs")))
        return original(env, action_cls, observation_cls, *args, **kwargs)

    for home in homes:
        if originals[home] is not None:
            home.create_app = create_app
    try:
        yield
    finally:
        for home, value in originals.items():
            if value is not None:
                home.create_app = value


_READ: dict[Path, OpenEnvApp] = {}


def read_openenv_folder(folder: Path) -> OpenEnvApp:
    """Import `folder`'s app module, as OpenEnv's server would, and return what its `create_app` was given
    (once per folder: a module imports once)."""
    if folder in _READ:
        return _READ[folder]
    module_name = _app_spec(folder).partition(":")[0]
    for path in (folder.parent, folder):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    if (folder / "__init__.py").is_file() and folder.name.isidentifier():
        module_name = f"{folder.name}.{module_name}"   # its relative imports (`from ..models import`) then work
    calls: list[OpenEnvApp] = []
    with _recording(calls):
        try:
            importlib.import_module(module_name)
        except ImportError as error:
            raise ConfigurationError(f"{folder}: cannot import {module_name} ({error}); install the environment's "
                                     f"dependencies (its pyproject.toml) into this venv") from None
    if not calls:
        raise ConfigurationError(f"{folder}: {module_name} never calls openenv's create_app(EnvClass, Action, "
                                 "Observation); serve its environment as module:Class instead")
    found = _READ[folder] = calls[-1]
    found.name = found.name or folder.name
    return found
