"""The landlock backend: sandboxes with no privileges and no namespaces, for a container whose seccomp profile
refuses user namespaces (a Space, Kubernetes' RuntimeDefault, Docker's default) and so bubblewrap.

Each sandbox is the supervisor run by the system's Python as a child of the server. Before its first request it
confines itself (`confine.py`): Landlock lets it read the system's folders, its Python's standard library and the
channel folder, and write only its own work folder and temporary folder (`TMPDIR`; the host's `/tmp` is out of
reach); site-packages, the server's code, a virtual environment and the working folder are not among them. Its
signals and abstract unix sockets stay inside its Landlock domain, so the server and other sandboxes are out of
reach; `/proc/<pid>/environ` and the like of processes outside it are refused. Each command runs in a process group
it may not leave, in a nested domain, under a seccomp filter and rlimits, and its group is killed when it ends.
Run as root, each sandbox also runs as a host uid of its own. The folders live under `<tmp>/envkit-landlock/<owner>`;
those of a server that died are removed when the next one starts.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .base import UIDS, Sandbox, SandboxError, SandboxLimits, SandboxUnavailableError, once
from .host import drop_to, readable_system
from ..owner import current_owner, owner_gone

__all__ = ["LandlockSandbox", "landlock_facilities"]

logger = logging.getLogger("envkit.sandbox")

#: Devices a command may read and write.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
PATH = "/usr/local/bin:/usr/bin:/bin"


def system_python() -> str:
    """The system's python3 (a virtual environment's would show its site-packages)."""
    for folder in PATH.split(":"):
        if os.access(f"{folder}/python3", os.X_OK):
            return f"{folder}/python3"
    raise SandboxUnavailableError(f"the landlock sandbox runs the system's python3, and there is none in {PATH}")


def remove_tree(path: str) -> None:
    """Remove `path` even where a command took away its own folders' permissions."""
    def allow_and_retry(function: Any, failed: str, _: object) -> None:
        try:
            os.chmod(os.path.dirname(failed), 0o700)
            function(failed)
        except OSError:
            pass
    shutil.rmtree(path, onerror=allow_and_retry)


class LandlockFacilities:
    """What the landlock backend reads, writes and enforces here, checked once by starting a sandbox."""

    def __init__(self) -> None:
        self.python = system_python()
        self.read = [*readable_system(), "/proc"]
        self.root_run = os.geteuid() == 0
        self.root = Path(tempfile.gettempdir()) / "envkit-landlock"
        self.root.mkdir(mode=0o711, exist_ok=True)
        self._remove_leftovers()
        probe = LandlockSandbox(SandboxLimits(), facilities=self)
        try:
            probe.start().wait_ready()
        except SandboxError as error:
            raise SandboxUnavailableError(f"Landlock cannot confine a sandbox here: {error}") from None
        self.abi = probe.enforced.get("landlock")
        probe.close()

    def _remove_leftovers(self) -> None:
        gone = [folder for folder in self.root.iterdir() if owner_gone(folder.name)]
        for folder in gone:
            remove_tree(str(folder))
        if gone:
            logger.info("removed the sandbox folders of %d servers that died", len(gone))

    def folder(self) -> Path:
        """This process's folder of sandboxes (made at first use: a forked worker is an owner of its own)."""
        mine = self.root / current_owner()
        mine.mkdir(mode=0o711, exist_ok=True)
        return mine

    def describe(self) -> str:
        uid = "a host uid per sandbox" if self.root_run else "one uid for all (not root): processes counted per uid"
        return (f"landlock sandboxes: Landlock ABI {self.abi} (system folders read-only without site-packages, a "
                "work and temporary folder each, no TCP, signals and abstract sockets kept in), seccomp (no sockets "
                "but unix ones with a channel; no ptrace, mount, bpf, keyctl, namespaces; no leaving the process "
                f"group), rlimits, {uid}; missing: a pid namespace (other processes' command lines show in /proc), "
                "cgroups (memory limited per process), a tmpfs (the disk limit is measured every 0.05 s), unix "
                "sockets outside a channel folder are reachable by path where one is given")


@once
def landlock_facilities() -> LandlockFacilities:
    """The landlock backend's facilities; the first call says in one log line what it enforces and what is missing."""
    facilities = LandlockFacilities()
    logger.warning("%s", facilities.describe())
    return facilities


class LandlockSandbox(Sandbox):
    """A sandbox confined by Landlock and seccomp, as a child process of this one."""

    backend = "landlock"

    def __init__(self, limits: SandboxLimits, channel_dir: str | None = None, *,
                 facilities: LandlockFacilities | None = None) -> None:
        super().__init__(limits, channel_dir)
        self._facilities = facilities or landlock_facilities()
        self.enforced: dict[str, Any] = {}
        self._arguments: list[str] = []
        self._home = tempfile.mkdtemp(dir=self._facilities.folder())
        self.workdir, self._tmp = f"{self._home}/work", f"{self._home}/tmp"
        self._uid = UIDS.take() if self._facilities.root_run else None
        for folder in (self.workdir, self._tmp):
            os.mkdir(folder, 0o700)
            if self._uid is not None:
                os.chown(folder, self._uid, self._uid)
        os.chmod(self._home, 0o711)

    @property
    def channel(self) -> str | None:
        return self.channel_dir     # no mount namespace: the sandbox sees the folder where the host has it

    def _argv(self, agent: list[str]) -> list[str]:
        # With no pid namespace every command line shows in /proc: the supervisor's arguments (its folders, its channel)
        # travel ahead of its source on stdin instead.
        self._arguments = agent[5:]
        return [self._facilities.python, *agent[1:5]]

    def _options(self) -> dict[str, Any]:
        read = self._facilities.read + ([self.channel_dir] if self.channel_dir else [])
        return {**super()._options(), "confine": {"read": read, "write": [self.workdir, self._tmp],
                                                  "devices": list(DEVICES),
                                                  "unix_sockets": self.channel_dir is not None,
                                                  "shared_uid": self._uid is None}}

    def _environment(self) -> dict[str, str] | None:
        return {"PATH": PATH, "HOME": self.workdir, "TMPDIR": self._tmp, "LANG": "C.UTF-8"}

    def _supervisor_source(self) -> str:
        arguments = f"import sys\nsys.argv[1:] = {self._arguments!r}\n"
        return arguments + (Path(__file__).parent / "confine.py").read_text() + "\n" + super()._supervisor_source()

    def _ready(self, answer: dict[str, Any]) -> None:
        self.enforced = {key: answer[key] for key in ("landlock", "seccomp") if key in answer}

    def _before_exec(self) -> None:
        if self._uid is not None:
            drop_to(self._uid)()

    def _cleanup(self) -> None:
        remove_tree(self._home)
        if self._uid is not None:
            UIDS.give_back(self._uid)
            self._uid = None
