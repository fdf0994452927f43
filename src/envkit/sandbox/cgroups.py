"""Memory and process-count limits for a whole local sandbox, from cgroup v1 controllers or cgroup v2.

Each sandbox gets a cgroup named `envkit-sandbox-<owner>-<n>` under the server's own (in every controller used), the
owner naming the server for certain (`owner.current_owner`: boot, pid namespace, pid, start time); its host process
joins it before exec, so everything the sandbox starts is counted. When the next server first opens a sandbox it
removes, anywhere in each controller's hierarchy it can see, the cgroups of owners provably gone (a pid alone would
not do: pids are reused, and a dead server's pid may name a live process by then).
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..owner import current_owner, owner_gone

__all__ = ["Cgroups", "Cgroup"]

PREFIX = "envkit-sandbox-"

logger = logging.getLogger("envkit.sandbox")


@dataclass
class Cgroup:
    """One sandbox's cgroup folders; `join()` runs in the child before exec."""

    folders: list[Path]

    def join(self) -> None:
        pid = str(os.getpid()).encode()
        for folder in self.folders:
            fd = os.open(folder / "cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def remove(self) -> None:
        """Remove the folders, waiting (up to 30 s) for the kernel to finish tearing down their last processes."""
        for folder in self.folders:
            pause = 0.001
            deadline = time.monotonic() + 30
            while True:
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:        # EBUSY: the last process is still being torn down
                    if time.monotonic() > deadline:
                        logger.warning("cgroup %s still busy after 30 s; the next server started after this one ends removes it", folder)
                        break
                    time.sleep(pause)
                    pause = min(pause * 2, 0.1)


class Cgroups:
    """The memory and pids controllers this process may write, found once."""

    def __init__(self) -> None:
        self.memory: Path | None = None
        self.pids: Path | None = None
        self.version = 0
        self.missing: list[str] = []
        self._count = itertools.count()
        self._roots: set[Path] = set()
        self._find()
        self._remove_orphans()

    def _find(self) -> None:
        own = _own_cgroups()
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            fstype, options = fields[fields.index("-") + 1], fields[-1].split(",")
            root, mountpoint = fields[3], fields[4]
            for controller in ("memory", "pids"):
                if fstype == "cgroup2" or fstype == "cgroup" and controller in options:
                    self._roots.add(Path(mountpoint))
                if fstype == "cgroup" and controller in options and controller in own:
                    self._offer(controller, _inside(Path(mountpoint), root, own[controller]), 1)
                elif fstype == "cgroup2" and "" in own:
                    folder = _inside(Path(mountpoint), root, own[""])
                    enabled = _words(folder / "cgroup.subtree_control")
                    if controller in enabled:
                        self._offer(controller, folder, 2)
        for controller in ("memory", "pids"):
            if getattr(self, controller) is None:
                self.missing.append(f"cgroup {controller} (no writable {controller} controller)")

    def _offer(self, controller: str, folder: Path, version: int) -> None:
        if getattr(self, controller) is None and os.access(folder, os.W_OK):
            setattr(self, controller, folder)
            self.version = max(self.version, version)

    def _remove_orphans(self) -> None:
        gone = [folder for root in self._roots for folder in _walk(root)
                if folder.name.startswith(PREFIX) and owner_gone(folder.name[len(PREFIX):].rsplit("-", 1)[0])]
        for folder in gone:
            Cgroup([folder]).remove()
        if gone:
            logger.info("removed %d cgroups left by servers that died", len(gone))

    def make(self, memory_bytes: int, processes: int) -> Cgroup:
        """A new cgroup holding at most `memory_bytes` and `processes` tasks (in the controllers present)."""
        name = f"{PREFIX}{current_owner()}-{next(self._count)}"
        made = Cgroup([])
        try:
            if self.memory is not None:
                folder = self.memory / name
                folder.mkdir()
                made.folders.append(folder)
                if (folder / "memory.max").exists():
                    _write(folder / "memory.max", memory_bytes)
                    _write(folder / "memory.swap.max", 0)
                else:
                    _write(folder / "memory.limit_in_bytes", memory_bytes)
                    if (folder / "memory.memsw.limit_in_bytes").exists():
                        _write(folder / "memory.memsw.limit_in_bytes", memory_bytes)
            if self.pids is not None:
                folder = self.pids / name
                if folder not in made.folders:
                    folder.mkdir()
                    made.folders.append(folder)
                _write(folder / "pids.max", processes)
        except OSError:
            made.remove()
            raise
        return made


def _own_cgroups() -> dict[str, str]:
    """Controller (\"\" for v2) -> this process's cgroup path in it."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            own[controller] = path
    return own


def _inside(mountpoint: Path, root: str, path: str) -> Path:
    relative = path[len(root):] if path.startswith(root) else path
    return mountpoint / relative.lstrip("/")


def _words(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


def _write(path: Path, value: int) -> None:
    path.write_text(str(value))


def _walk(root: Path) -> list[Path]:
    """Every cgroup folder below `root`; one removed while it is walked is left out."""
    found = []
    for folder, children, _ in os.walk(root, onerror=lambda error: None):
        found += [Path(folder, child) for child in children]
    return found
