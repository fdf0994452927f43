"""Task images: built once from a task's `environment/` and named by its content, so an edited folder builds anew.

Builds run on the Docker engine the sandboxes use (`DOCKER_HOST`), with the classic builder (its step containers
removed after a failed build too), one at a time per image
across this machine's server processes (a lock file beside the build's log). A failed build raises one line that
names the log.
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
            last = _last_line(log)
            said = f"{failed}: {last}" if last else failed
            raise ImageBuildError(f"building the image of task {task.name} failed ({said}); its log: {log}")
        logger.info("built %s in %.1f s", tag, time.monotonic() - started)


def _last_line(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""
