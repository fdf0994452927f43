"""Task images: built once from a task's `environment/` and named by its content, so an edited folder builds anew.

Builds run on the Docker engine the sandboxes use (`DOCKER_HOST`), with the classic builder (its step containers
removed after a failed build too), one at a time per image
across this machine's server processes (a lock file beside the build's log). A failed build raises one line that
names the step that failed, its last words, the build network setting where a download may be at fault, and the log.
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path

from ..sandbox import docker_facilities
from .tasks import HarborTask, HarborTaskError

__all__ = ["ImageBuildError", "task_image", "build_log_dir"]

logger = logging.getLogger("envkit.harbor")

_locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
_built: dict[str, str] = {}


class ImageBuildError(HarborTaskError):
    """A task's image could not be built; the message names the build's log."""


def build_log_dir() -> Path:
    """Where build logs go: `ENVKIT_HARBOR_LOGS`, else ~/.cache/envkit/harbor-builds."""
    folder = Path(os.environ.get("ENVKIT_HARBOR_LOGS") or Path.home() / ".cache" / "envkit" / "harbor-builds")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def task_image(task: HarborTask) -> tuple[str, str]:
    """The task's image (built now if the engine lacks it) and the folder its commands run in."""
    tag = task.image_tag()
    with _locks[tag]:
        if tag not in _built:
            if _workdir_of(tag) is None:
                _build(task, tag)
            workdir = _workdir_of(tag)
            if workdir is None:
                raise ImageBuildError(f"the image {tag} of task {task.name} vanished from the Docker engine after "
                                      "its build; build again")
            _built[tag] = task.workdir or workdir or "/"
        return tag, _built[tag]


def _workdir_of(tag: str) -> str | None:
    """The image's WORKDIR ("" when it sets none), or None when the engine has no such image."""
    answer = docker_facilities().cli("image", "inspect", "--format", "{{.Config.WorkingDir}}", tag)
    return answer.stdout.strip() if answer.returncode == 0 else None


def _build(task: HarborTask, tag: str) -> None:
    facilities = docker_facilities()
    assert facilities.docker is not None
    log = build_log_dir() / f"{tag.partition('/')[2].replace(':', '-')}.log"
    with open(log.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # another server process may be building it
        if _workdir_of(tag) is not None:
            return
        argv = [facilities.docker, "build", "--force-rm", "--tag", tag, "--label", f"envkit.harbor.task={task.name}"]
        network = os.environ.get("ENVKIT_HARBOR_BUILD_NETWORK")
        if network:
            argv += ["--network", network]
        logger.info("building the image of task %s (%s)", task.name, tag)
        started = time.monotonic()
        with open(log, "w") as output:
            try:
                done = subprocess.run([*argv, str(task.environment_dir)], stdout=output, stderr=subprocess.STDOUT,
                                      timeout=task.build_timeout_s, env={**os.environ, "DOCKER_BUILDKIT": "0"})
                failed = f"exit code {done.returncode}" if done.returncode != 0 else None
            except subprocess.TimeoutExpired:
                failed = f"not done in build_timeout_sec = {task.build_timeout_s:g} s"
        if failed is not None:
            raise ImageBuildError(f"building the image of task {task.name} failed ({failed}){_why(log, network)}; "
                                  f"its log: {log}")
        logger.info("built %s in %.1f s", tag, time.monotonic() - started)


#: What a build step prints when its container cannot reach the network.
_OFFLINE = ("Temporary failure in name resolution", "Could not resolve", "Network is unreachable",
            "Failed to establish a new connection", "Connection timed out", "No route to host",
            "Failed to fetch", "Could not connect to")


def _why(log: Path, network: str | None) -> str:
    """The step that failed and its last words, whole; and, where the build had no network of its own, the setting
    that gives it one (named whenever a download may have been what failed)."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    steps = [index for index, line in enumerate(lines) if line.startswith("Step ")]
    after = lines[steps[-1] + 1:] if steps else lines
    said = [line for line in after if not line.startswith(("---> ", "Removing intermediate"))][-3:]
    parts = [f"at {lines[steps[-1]]}:" if steps else "", " / ".join(said)]
    text = (": " + " ".join(part for part in parts if part)).rstrip(":") if any(parts) else ""
    if network:
        return text
    offline = any(marker in line for line in lines for marker in _OFFLINE)
    hint = ("its steps could not reach the network" if offline
            else "if a step downloads (apt-get, pip, curl), it may have had no route out")
    return f"{text}; {hint}: build with ENVKIT_HARBOR_BUILD_NETWORK=host (the engine's host network)"
