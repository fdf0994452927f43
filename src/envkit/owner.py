"""Who owns what a sandbox leaves on the host, in a form that tells for certain when its owner is gone.

A pid alone does not: it is reused, and a pid in another pid namespace (a server in a container) names some other
process here. An owner is the boot, the pid namespace, the pid and that process's start time; a later server removes
what an owner left only when that owner is provably gone: the same boot and pid namespace as its own, and no process
of that pid and start time. An owner of another boot may be another host sharing the same folder or engine, so it
stays.
"""

from __future__ import annotations

import os
from functools import cache

__all__ = ["current_owner", "owner_gone"]


@cache
def _boot() -> str:
    with open("/proc/sys/kernel/random/boot_id") as file:
        return file.read().strip().replace("-", "")[:12]


def _namespace() -> str:
    return os.readlink("/proc/self/ns/pid").split("[")[-1].rstrip("]")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), or None if none runs."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def current_owner() -> str:
    """This process as an owner, `<boot>.<pid namespace>.<pid>.<start time>` (read at each call: a forked worker
    is an owner of its own)."""
    pid = os.getpid()
    return f"{_boot()}.{_namespace()}.{pid}.{_start_time(pid)}"


def owner_gone(owner: str) -> bool:
    """Whether the process `owner` names has certainly ended: False for a malformed owner, or one of another boot or
    pid namespace (its processes are out of sight here)."""
    parts = owner.split(".")
    if len(parts) != 4 or not parts[2].isdigit():
        return False
    boot, namespace, pid, started = parts
    return boot == _boot() and namespace == _namespace() and _start_time(int(pid)) != started
