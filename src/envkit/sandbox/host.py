"""What of the host a sandbox without an image of its own sees: the system's folders, read-only, without any
Python's installed packages, the server's code, its virtual environment or its working folder."""

from __future__ import annotations

import os
import site
import sys
from glob import glob
from pathlib import Path
from typing import Callable

__all__ = ["SYSTEM", "hidden_folders", "readable_system", "drop_to"]

#: System folders a sandbox sees, read-only, when the host has them.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc/alternatives", "/etc/ld.so.cache",
          "/etc/ssl", "/etc/localtime")


def hidden_folders() -> set[str]:
    """Folders under the system's that a sandbox must not read: every Python's site-packages and dist-packages, the
    folder envkit was imported from, the server's virtual environment and its working folder."""
    found = set(glob("/usr/lib/python3*/*-packages") + glob("/usr/local/lib/python3*/*-packages") +
                glob("/usr/lib/python3/dist-packages") + site.getsitepackages())
    found |= {str(Path(__file__).resolve().parents[2]), os.getcwd()}
    if sys.prefix != sys.base_prefix:       # a virtual environment (a system Python's prefix is /usr)
        found.add(sys.prefix)
    return {os.path.realpath(folder) for folder in found if os.path.isdir(folder)}


def readable(folder: str, hidden: set[str]) -> list[str]:
    """`folder` when nothing in it is hidden, else its entries that hold nothing hidden (symlinks left out)."""
    if folder in hidden:
        return []
    if not any(inner.startswith(folder.rstrip("/") + "/") for inner in hidden):
        return [folder]
    granted = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                granted += readable(entry.path, hidden)
            elif not entry.is_symlink():
                granted.append(entry.path)
    return granted


def readable_system() -> list[str]:
    """The system's folders and files a sandbox may read: `SYSTEM` less what `hidden_folders` holds."""
    hidden = hidden_folders()
    granted: list[str] = []
    for folder in sorted({os.path.realpath(path) for path in SYSTEM if os.path.exists(path)}):
        granted += readable(folder, hidden)
    return granted


def drop_to(uid: int) -> Callable[[], None]:
    """What a child runs before exec to become `uid` (and its group), with no supplementary groups."""
    def drop() -> None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    return drop
