"""Harbor task folders, read: a task's instruction, its `task.toml` settings, and the splits of a folder of tasks.

A task folder holds `instruction.md`, `task.toml`, `environment/Dockerfile`, `tests/test.sh` and, for the oracle,
`solution/solve.sh`. A folder of tasks is read into splits:

- a task folder itself: one task, in `test`;
- a folder whose subfolders are tasks: every task in `test`;
- a folder whose subfolders hold tasks (`train/`, `test/`, ...): each subfolder is a split.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError

__all__ = ["HarborTask", "HarborTaskError", "load_task", "find_tasks", "is_task_folder", "is_task_collection"]

CONFIG = "task.toml"
#: `[environment].network_mode` values: Harbor's names; envkit's default is no network.
NETWORK_MODES = ("no-network", "public", "allowlist")
#: What a task gets where its task.toml is silent (Harbor's verifier default is 600 s; the agent has none).
DEFAULT_AGENT_TIMEOUT_S = 600.0
DEFAULT_VERIFIER_TIMEOUT_S = 600.0
DEFAULT_BUILD_TIMEOUT_S = 600.0
DEFAULT_CPUS = 1.0
DEFAULT_MEMORY_MB = 2048
DEFAULT_STORAGE_MB = 1024
#: The files every task has.
REQUIRED = ("instruction.md", CONFIG, "environment/Dockerfile", "tests/test.sh")
#: `${VAR}` and `${VAR:-default}` in task.toml's env tables, filled from the server's environment.
TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class HarborTaskError(ConfigurationError):
    """A task folder that cannot be served: a file missing, an invalid task.toml, an unsupported setting."""


@dataclass(frozen=True)
class HarborTask:
    """One Harbor task: where it is, what the agent is told, and the limits its container and tests run under."""

    name: str
    path: Path
    instruction: str
    agent_timeout_s: float
    verifier_timeout_s: float
    build_timeout_s: float
    cpus: float
    memory_mb: int
    storage_mb: int
    network: bool
    workdir: str | None
    environment_env: dict[str, str] = field(default_factory=dict)
    verifier_env: dict[str, str] = field(default_factory=dict)
    solution_env: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    def image_tag(self) -> str:
        """The image's name: the task's name and a digest of everything in `environment/` (names, modes, bytes)."""
        digest = hashlib.sha256()
        for file in sorted(self.environment_dir.rglob("*")):
            if file.is_file():
                digest.update(f"{file.relative_to(self.environment_dir).as_posix()}\0{file.stat().st_mode & 0o777}\0"
                              .encode())
                digest.update(file.read_bytes())
        slug = re.sub(r"[^a-z0-9_.-]+", "-", self.name.lower()).strip("-.") or "task"
        return f"envkit-harbor/{slug}:{digest.hexdigest()[:16]}"


def is_task_folder(folder: Path) -> bool:
    return (folder / CONFIG).is_file()


def is_task_collection(folder: Path) -> bool:
    """Whether `folder` is a task, or holds tasks one or two levels down (and is not an env package)."""
    if not folder.is_dir() or (folder / "pyproject.toml").is_file():
        return False
    if is_task_folder(folder):
        return True
    return any(is_task_folder(child) or any(is_task_folder(grandchild) for grandchild in _subfolders(child))
               for child in _subfolders(folder))


def _subfolders(folder: Path) -> list[Path]:
    return sorted(child for child in folder.iterdir() if child.is_dir() and not child.name.startswith("."))


def find_tasks(root: Path | str) -> dict[str, list[HarborTask]]:
    """The tasks under `root` by split (see the module's docstring); raises `HarborTaskError` naming the folder."""
    root = Path(root).resolve()
    if not root.is_dir():
        raise HarborTaskError(f"{root} is not a folder of Harbor tasks")
    if is_task_folder(root):
        return {"test": [load_task(root)]}
    children = _subfolders(root)
    if any(is_task_folder(child) for child in children):
        return {"test": [load_task(child) for child in children if is_task_folder(child)]}
    splits = {child.name: [load_task(task) for task in _subfolders(child) if is_task_folder(task)]
              for child in children}
    splits = {name: tasks for name, tasks in splits.items() if tasks}
    if not splits:
        raise HarborTaskError(f"{root} holds no Harbor task (a folder with {CONFIG}, instruction.md, "
                              "environment/Dockerfile and tests/test.sh)")
    names = [task.name for tasks in splits.values() for task in tasks]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise HarborTaskError(f"{root}: task names must differ across splits; {', '.join(twice)} appear twice")
    return splits


def load_task(folder: Path | str) -> HarborTask:
    """Read one task folder; a missing file or an invalid setting raises `HarborTaskError` saying which."""
    folder = Path(folder).resolve()
    for name in REQUIRED:
        if not (folder / name).is_file():
            raise HarborTaskError(f"{folder} is not a Harbor task: it has no {name}")
    try:
        config = tomllib.loads((folder / CONFIG).read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise HarborTaskError(f"{folder / CONFIG}: invalid TOML ({error})") from None
    where = folder / CONFIG
    agent, verifier = _table(config, "agent", where), _table(config, "verifier", where)
    environment, solution = _table(config, "environment", where), _table(config, "solution", where)
    if config.get("steps"):
        raise HarborTaskError(f"{where}: multi-step tasks ([[steps]]) are not supported; give the task one step")
    if environment.get("docker_image"):
        raise HarborTaskError(f"{where}: [environment].docker_image is not supported; build from "
                              "environment/Dockerfile (FROM that image)")
    package = config.get("task") if isinstance(config.get("task"), dict) else {}
    name = str(package.get("name") or folder.name).rpartition("/")[2]
    return HarborTask(
        name=name, path=folder, instruction=(folder / "instruction.md").read_text(),
        agent_timeout_s=_positive(agent.get("timeout_sec"), DEFAULT_AGENT_TIMEOUT_S, f"{where}: [agent].timeout_sec"),
        verifier_timeout_s=_positive(verifier.get("timeout_sec"), DEFAULT_VERIFIER_TIMEOUT_S,
                                    f"{where}: [verifier].timeout_sec"),
        build_timeout_s=_positive(environment.get("build_timeout_sec"), DEFAULT_BUILD_TIMEOUT_S,
                                 f"{where}: [environment].build_timeout_sec"),
        cpus=_positive(environment.get("cpus"), DEFAULT_CPUS, f"{where}: [environment].cpus"),
        memory_mb=_megabytes(environment, "memory", DEFAULT_MEMORY_MB, where),
        storage_mb=_megabytes(environment, "storage", DEFAULT_STORAGE_MB, where),
        network=_network(environment, where), workdir=environment.get("workdir"),
        environment_env=_env(environment, where, "environment"), verifier_env=_env(verifier, where, "verifier"),
        solution_env=_env(solution, where, "solution"),
        metadata=config.get("metadata") if isinstance(config.get("metadata"), dict) else {})


def _table(config: dict[str, Any], name: str, where: Path) -> dict[str, Any]:
    table = config.get(name, {})
    if not isinstance(table, dict):
        raise HarborTaskError(f"{where}: [{name}] must be a table")
    return table


def _positive(value: Any, default: float, what: str) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise HarborTaskError(f"{what} must be a positive number; got {value!r}")
    return float(value)


#: The older size form harbor still reads (`memory = "2G"`, `storage = "10G"`): a number and K, M or G, in MB.
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([KMG])\s*", flags=re.I)
_PER_MB = {"K": 1 / 1024, "M": 1, "G": 1024}


def _megabytes(environment: dict[str, Any], name: str, default: int, where: Path) -> int:
    """`[environment].NAME_mb`, or the older `NAME = "10G"` as harbor reads it (G is 1024 MB); both must agree."""
    current = f"{name}_mb"
    megabytes = int(_positive(environment.get(current), default, f"{where}: [environment].{current}"))
    legacy = environment.get(name)
    if legacy is None:
        return megabytes
    size = _SIZE.fullmatch(legacy) if isinstance(legacy, str) else None
    if size is None:
        raise HarborTaskError(f"{where}: [environment].{name} must be a size like \"512M\" or \"10G\" (or give "
                              f"{current} = a number of MB); got {legacy!r}")
    older = int(float(size.group(1)) * _PER_MB[size.group(2).upper()])
    if current in environment and older != megabytes:
        raise HarborTaskError(f"{where}: [environment].{name} = {legacy!r} is {older} MB but {current} is "
                              f"{megabytes}; give one of them")
    return older


def _network(environment: dict[str, Any], where: Path) -> bool:
    """Whether the task's container has a network: `network_mode = "public"` (or the older `allow_internet = true`);
    envkit's default is none. An allowlist cannot be enforced here and is refused."""
    mode = environment.get("network_mode")
    if mode is None:
        return environment.get("allow_internet") is True
    if mode not in NETWORK_MODES:
        raise HarborTaskError(f"{where}: [environment].network_mode must be one of {', '.join(NETWORK_MODES)}; "
                              f"got {mode!r}")
    if mode == "allowlist":
        raise HarborTaskError(f"{where}: network_mode = \"allowlist\" cannot be enforced by envkit's containers; "
                              "use \"no-network\" or \"public\"")
    return mode == "public"


def _env(table: dict[str, Any], where: Path, name: str) -> dict[str, str]:
    """A task.toml env table, its `${VAR}` templates filled; a variable unset and without a default is refused."""
    env = table.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(value, str) for value in env.values()):
        raise HarborTaskError(f"{where}: [{name}].env must map names to strings")

    def fill(match: re.Match[str]) -> str:
        value = os.environ.get(match.group(1), match.group(2))
        if value is None:
            raise HarborTaskError(f"{where}: [{name}].env needs ${{{match.group(1)}}}, which is not set; export it")
        return value
    return {key: TEMPLATE.sub(fill, value) for key, value in env.items()}
