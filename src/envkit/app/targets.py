"""Finding what to serve: bundled env names, env folders and `module:attr` targets, turned into an app.

A `module:Class` target names a module importable from the working folder (`guess:GuessEnvironment`) or a
file (`./guess.py:GuessEnvironment`).

A folder of Harbor tasks (or one task: a folder with `task.toml`) is served by `envkit.harbor`.

An OpenEnv environment folder (`openenv.yaml`, `server/app.py`) and `module:Class` of an OpenEnv `Environment` or
`MCPEnvironment` subclass are served by `envkit.openenv_envs`, unchanged; the openenv package must be installed.

An env folder is a Space-ready package whose `pyproject.toml` has a `[tool.envkit]` table:

    [tool.envkit]
    name = "echo"
    environment = "echo_env.environment:EchoEnvironment"

The action and observation models are read from the class's generic parameters
(`Environment[EchoAction, EchoObservation, State]`) unless the table names them
(`action = "..."`, `observation = "..."`).

The bundled envs (echo, wordle, catch, coding) are env folders like any other: `envs/` at the root of a source checkout,
copied into an installed wheel as `envkit/bundled_envs/` (`BUNDLED_ROOTS`).
"""

from __future__ import annotations

import difflib
import importlib
import logging
import os
import sys
import sysconfig
import tomllib
import traceback
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..environment import Action, Environment, Observation
from ..errors import ConfigurationError
from ..openenv_envs import is_openenv_class, is_openenv_folder, read_openenv_folder
from .settings import ServerSettings

__all__ = ["EnvTarget", "resolve_target", "bundled_envs", "app_from_environment", "environment_models"]

logger = logging.getLogger("envkit.targets")
_PACKAGE_DIR = Path(__file__).resolve().parents[1]   # src/envkit
#: Where bundled envs live: inside an installed wheel, or at the root of a source checkout.
BUNDLED_ROOTS = (_PACKAGE_DIR / "bundled_envs", _PACKAGE_DIR.parents[1] / "envs")


class TargetError(ConfigurationError):
    """What `envkit serve` was asked to serve cannot be found or loaded."""


@dataclass
class EnvTarget:
    """A servable environment: its class and models, where it came from, and its manifest table."""

    name: str
    env_class: type[Environment]
    action_cls: type[Action]
    observation_cls: type[Observation]
    root: Path | None = None
    manifest: dict[str, Any] | None = None


def bundled_envs() -> dict[str, Path]:
    """Bundled environment folders by name (echo, wordle, catch, coding, ...)."""
    found: dict[str, Path] = {}
    for root in BUNDLED_ROOTS:
        if root.is_dir():
            for folder in sorted(root.iterdir()):
                if (folder / "pyproject.toml").is_file() and folder.name not in found:
                    found[folder.name] = folder
    return found


def environment_models(env_class: type[Environment]) -> tuple[type[Action], type[Observation]]:
    """The (Action, Observation) models an environment class declares via `Environment[A, O, S]`."""
    for klass in env_class.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(base) is Environment:
                args = typing.get_args(base)
                if len(args) >= 2 and all(isinstance(arg, type) for arg in args[:2]):
                    return args[0], args[1]
    raise ConfigurationError(f"{env_class.__qualname__} does not name its models; declare it as "
                             "`class MyEnv(Environment[MyAction, MyObservation, State])`")


def app_from_environment(env_class: type[Environment], *, env_name: str | None = None,
                         settings: ServerSettings | None = None, **setting_values: Any) -> Any:
    """`create_app` for a class, with `settings` (default: from the environment variables,
    `ServerSettings.from_environment`) changed by `setting_values`."""
    from .asgi import create_app

    action_cls, observation_cls = environment_models(env_class)
    metadata = dict(getattr(env_class, "OPENENV_METADATA", {}))
    settings = settings or ServerSettings.from_environment(concurrent=env_class.SUPPORTS_CONCURRENT_SESSIONS)
    return create_app(env_class, action_cls, observation_cls, env_name=env_name, metadata=metadata,
                      settings=ServerSettings.of(settings, **setting_values))


def read_manifest(folder: Path) -> dict[str, Any]:
    """The `[tool.envkit]` table of an env folder's pyproject.toml."""
    pyproject = folder / "pyproject.toml"
    if not pyproject.is_file():
        raise TargetError(f"{folder} has no pyproject.toml; an env folder needs one with a [tool.envkit] table")
    try:
        table = tomllib.loads(pyproject.read_text()).get("tool", {}).get("envkit")
    except tomllib.TOMLDecodeError as error:
        raise TargetError(f"{pyproject}: invalid TOML ({error})") from None
    if not isinstance(table, dict) or "environment" not in table:
        raise TargetError(f'{pyproject} has no [tool.envkit] table with environment = "module:Class"')
    return table


def is_file_target(target: str) -> bool:
    """Whether `target` names a class in a Python file, `./my_env.py:MyEnvironment`."""
    return ":" in target and target.rpartition(":")[0].endswith(".py")


def import_attribute(spec: str) -> Any:
    """Import `module:attr` (dotted attr allowed); modules in the working folder import, as they do for uvicorn."""
    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr:
        raise TargetError(f"{spec!r} is not of the form module:attribute")
    folder = Path.cwd()
    if module_name.endswith(".py"):   # ./my_env.py:MyEnvironment: the file's folder goes on the path
        path = Path(module_name)
        if not path.is_file():
            raise TargetError(f"{spec!r}: there is no file {path}")
        folder, module_name = path.resolve().parent, path.stem
        if not module_name.isidentifier():
            raise TargetError(f"{path} cannot be imported: {module_name!r} is not a Python module name; rename the "
                              "file (letters, digits and underscores)")
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    elif "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    _refuse_shadowed(module_name.partition(".")[0], folder)
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as error:
        if error.name is not None and module_name != error.name and not module_name.startswith(error.name + "."):
            raise TargetError(f"cannot import {module_name!r}: it imports {error.name!r}, which is not installed "
                              f"({error})") from None
        raise TargetError(f"cannot import {module_name!r}: {error}") from None
    except SyntaxError as error:
        where = f"{error.filename}, line {error.lineno}" if error.filename else "its source"
        raise TargetError(f"cannot import {module_name!r}: syntax error in {where}: {error.msg}") from None
    except Exception as error:  # the module's own code raised while it was imported: say where
        logger.debug("importing %s raised", module_name, exc_info=error)
        raise TargetError(f"cannot import {module_name!r}: importing it raised {type(error).__name__}: {error} "
                          f"({_where(error)}; `envkit serve ... --log-level debug` prints the traceback)") from None
    for part in attr.split("."):
        if not hasattr(value, part):
            raise TargetError(f"module {module_name!r} has no attribute {attr!r}")
        value = getattr(value, part)
    return value


def _refuse_shadowed(name: str, folder: Path) -> None:
    """Raise when the user's `name.py` (or `name/`) in `folder` has a standard library module's name: Python would
    import the standard library's module instead, and the error would be a puzzle about a missing class."""
    if name not in sys.stdlib_module_names:
        return
    for own in (folder / f"{name}.py", folder / name):
        if own.exists():
            raise TargetError(f"{own} has the name of the standard library's {name!r} module, which Python imports in "
                              f"its place; rename it (e.g. {name}_env{own.suffix}) and name the new module")


def _where(error: BaseException) -> str:
    """The innermost line of the user's own code in `error`'s traceback (not the standard library's, nor
    envkit's, nor an installed package's), and the line that raised when that is elsewhere."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if not frame.filename.startswith("<")]
    if not frames:
        return "in the module"
    own = [frame for frame in frames if not _library_file(frame.filename)]
    line = own[-1] if own else frames[-1]
    where = f"{line.filename}, line {line.lineno}" + (f": {line.line.strip()}" if line.line else "")
    if line is not frames[-1]:
        where += f"; raised in {frames[-1].filename}, line {frames[-1].lineno}"
    return where


def _library_file(filename: str) -> bool:
    """Whether `filename` belongs to the standard library, an installed package or envkit itself."""
    paths = sysconfig.get_paths()
    roots = {paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"], str(_PACKAGE_DIR)}
    resolved = str(Path(filename).resolve())
    return any(resolved.startswith(str(Path(root).resolve()) + os.sep) for root in roots)


def resolve_target(target: str) -> EnvTarget:
    """Turn a bundled env name, an env folder path or `module:Class` into an `EnvTarget`."""
    folder = Path(target)
    if ":" not in target or folder.exists() and not is_file_target(target):
        if not folder.is_dir():
            bundled = bundled_envs()
            if target not in bundled:
                known = ", ".join(bundled) or "none found"
                close = difflib.get_close_matches(target, bundled, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise TargetError(f"{target!r} is neither a bundled env ({known}), an env folder, nor "
                                  f"module:Class{hint}")
            folder = bundled[target]
        return _target_from_folder(folder.resolve())
    return _target_from_class(import_attribute(target), target)


def _target_from_folder(folder: Path) -> EnvTarget:
    from ..harbor import HarborTaskError, harbor_environment, is_task_collection

    if is_task_collection(folder):   # a Harbor task, or a folder of them
        try:
            env_class = harbor_environment(folder)
        except HarborTaskError as error:
            raise TargetError(str(error)) from None
        target = _target_from_class(env_class, str(folder))
        target.name, target.root = folder.name, folder
        return target
    if is_openenv_folder(folder) and "[tool.envkit]" not in _text(folder / "pyproject.toml"):
        found = read_openenv_folder(folder)
        target = _openenv_target(found.factory, found.action_cls, found.observation_cls, found.name)
        target.root = folder
        return target
    manifest = read_manifest(folder)
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    target = _target_from_class(import_attribute(manifest["environment"]), manifest["environment"])
    if "action" in manifest:
        target.action_cls = import_attribute(manifest["action"])
    if "observation" in manifest:
        target.observation_cls = import_attribute(manifest["observation"])
    target.name = manifest.get("name", folder.name)
    target.root, target.manifest = folder, manifest
    return target


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def _openenv_target(factory: Any, action_cls: type, observation_cls: type, name: str) -> EnvTarget:
    """An OpenEnv environment, wrapped as an envkit class (`envkit.openenv_envs`)."""
    from ..openenv_envs import wrap_openenv

    env_class, action, observation, metadata = wrap_openenv(factory, action_cls, observation_cls, name=name)
    env_class.OPENENV_METADATA = metadata
    return EnvTarget(name, env_class, action, observation)


def _target_from_class(value: Any, spec: str) -> EnvTarget:
    if is_openenv_class(value):
        action_cls, observation_cls = _openenv_models(value, spec)
        return _openenv_target(value, action_cls, observation_cls, value.__name__)
    if not (isinstance(value, type) and issubclass(value, Environment)):
        raise TargetError(f"{spec} is {value!r}, not an envkit Environment subclass")
    action_cls, observation_cls = environment_models(value)
    return EnvTarget(value.__name__, value, action_cls, observation_cls)


def _openenv_models(env_class: type, spec: str) -> tuple[type, type]:
    """The (Action, Observation) an OpenEnv class declares via `Environment[A, O, S]` (`MCPEnvironment`s that
    name none take OpenEnv's `CallToolAction` and `CallToolObservation`)."""
    for klass in env_class.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            args = typing.get_args(base)
            if len(args) >= 2 and all(isinstance(arg, type) for arg in args[:2]):
                return args[0], args[1]
    if hasattr(env_class, "get_callables") or any(klass.__name__ == "MCPEnvironment" for klass in env_class.__mro__):
        from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

        return CallToolAction, CallToolObservation
    raise TargetError(f"{spec}: {env_class.__qualname__} does not name its models; declare it as "
                      "`class MyEnv(Environment[MyAction, MyObservation, State])` or serve its folder "
                      "(openenv.yaml, server/app.py)")
