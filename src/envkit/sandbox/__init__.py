"""Sandboxes: a session's untrusted commands run isolated, with limits, and end with the session.

    from envkit.sandbox import open_sandbox, SandboxLimits

    with open_sandbox(limits=SandboxLimits(wall_s=5)) as box:
        box.write_file("main.py", "print(6 * 7)")
        print(box.run("python3 main.py").stdout)       # 42

Backends: "local" (bubblewrap), "docker" (a container per session), "landlock" (Landlock and seccomp, no
privileges: for containers that refuse user namespaces), "auto" (the first of these that works here, in that order,
else `SandboxUnavailableError` saying what each lacks); `ENVKIT_SANDBOX=local|docker|landlock` chooses for "auto".
`channel_dir=` shows a host folder read-only to the sandbox (at /run/envkit, or where it is for landlock:
`Sandbox.channel`), for the host's unix sockets: a sandbox's one way out (`channel_dir=True`: a fresh folder of the
sandbox's own, removed when it closes).
See docs/environments.md#sandboxes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, TypeVar

from ..owner import current_owner, owner_gone

from .base import (CHANNEL, RunResult, Sandbox, SandboxBusyError, SandboxError, SandboxLimits, SandboxLostError,
                   SandboxPathError, SandboxUnavailableError, clip, once)
from .docker import DockerOptions, docker_facilities
from .episode import SandboxEpisode
from .pool import close_pools, pool_for

__all__ = ["Sandbox", "SandboxLimits", "RunResult", "open_sandbox", "SandboxError", "SandboxLostError",
           "SandboxPathError", "SandboxUnavailableError", "SandboxBusyError", "clip", "close_pools", "BACKENDS", "start_with_channel",
           "DockerOptions", "docker_facilities", "CHANNEL", "SandboxEpisode"]

BACKENDS = ("auto", "local", "docker", "landlock")
#: The image a docker sandbox runs when none is named.
DEFAULT_IMAGE = "python:3.11-slim"


def open_sandbox(backend: str = "auto", *, limits: SandboxLimits | None = None, image: str | None = None,
                 channel_dir: str | os.PathLike[str] | bool | None = None, docker: DockerOptions | None = None
                 ) -> Sandbox:
    """A started sandbox, ready for its first command; close it (or use `with`) when its session ends.

    Args:
        backend: "local", "docker", "landlock" or "auto" (see the module's docstring).
        limits: what the sandbox may use; default `SandboxLimits()`.
        image: the docker backend's image (default python:3.11-slim); naming one makes "auto" choose docker.
        channel_dir: a host folder the sandbox sees, read-only, at `/run/envkit`: the only way out of it, for unix
            sockets the host listens on there (`Sandbox.admit` lets the sandbox connect to one). The folder stays the
            caller's; True makes a fresh one that is the sandbox's own, removed when it closes. A sandbox with a
            channel of the caller's is started for it, not taken from a warm pool; a docker sandbox with one of its
            own comes from a warm pool of such containers.
        docker: how the docker backend's container differs from its default (`DockerOptions`); naming them makes
            "auto" choose docker.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    limits = SandboxLimits() if limits is None else limits
    if not isinstance(limits, SandboxLimits):
        raise ValueError(f"limits must be a SandboxLimits; got {type(limits).__name__}")
    if docker is not None and not isinstance(docker, DockerOptions):
        raise ValueError(f"docker must be a DockerOptions; got {type(docker).__name__}")
    chosen = _choose(backend, image if docker is None else image or DEFAULT_IMAGE)
    if chosen in ("local", "landlock"):
        if image is not None or docker is not None:
            raise ValueError(f"the {chosen} backend runs the host's /usr, not an image; leave image and docker out or "
                             "use docker")
        if chosen == "local":
            from .local import LocalSandbox as Local
        else:
            from .landlock import LandlockSandbox as Local
        if channel_dir is not None:
            return start_with_channel(lambda folder: Local(limits, folder), channel_dir)
        return pool_for((chosen, limits), lambda: Local(limits)).take()
    from .docker import DockerSandbox, docker_facilities
    image, options = image or DEFAULT_IMAGE, docker or DockerOptions()
    docker_facilities().check_image(image)
    if channel_dir is True:     # a folder of its own: such containers wait in a pool of their own
        return pool_for(("docker", limits, image, options, "own channel"), lambda: with_own_channel(
            lambda folder: DockerSandbox(limits, image, folder, options))).take()
    if channel_dir is not None:
        return start_with_channel(lambda folder: DockerSandbox(limits, image, folder, options), channel_dir)
    return pool_for(("docker", limits, image, options), lambda: DockerSandbox(limits, image, None, options)).take()


SandboxT = TypeVar("SandboxT", bound=Sandbox)


def start_with_channel(make: Callable[[str], SandboxT], channel_dir: str | os.PathLike[str] | bool) -> SandboxT:
    """`make(folder)` started and ready, with `channel_dir` as its channel folder: a path is checked and stays the
    caller's; True makes a fresh folder that is the sandbox's own, removed when it closes (or fails to start)."""
    if channel_dir is True:
        return with_own_channel(make).start().wait_ready()
    return make(_channel(channel_dir)).start().wait_ready()


#: Channel folders a sandbox owns are `<tmp>/envkit-channel-<owner>-<random>`.
CHANNEL_PREFIX = "envkit-channel-"


def with_own_channel(make: Callable[[str], SandboxT]) -> SandboxT:
    """`make(folder)`, not started, with a fresh channel folder that is the sandbox's own (removed when it closes;
    if this process is killed, by the next process that makes one)."""
    _remove_left_channels()
    folder = os.path.realpath(tempfile.mkdtemp(prefix=f"{CHANNEL_PREFIX}{current_owner()}-"))
    try:
        sandbox = make(folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    sandbox.owns_channel = True
    return sandbox


@once
def _remove_left_channels() -> None:
    """Remove the channel folders of owners provably gone (a server killed with -9 cannot remove its own)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{CHANNEL_PREFIX}*"):
        if owner_gone(folder.name[len(CHANNEL_PREFIX):].rsplit("-", 1)[0]):
            shutil.rmtree(folder, ignore_errors=True)


def _channel(channel_dir: object) -> str:
    """The channel folder's real path, checked: an existing folder whose path a bind mount can carry."""
    if not isinstance(channel_dir, (str, os.PathLike)):
        raise ValueError(f"channel_dir must be a folder's path (or True, for a folder of the sandbox's own); "
                         f"got {channel_dir!r}")
    real = os.path.realpath(channel_dir)
    if not os.path.isdir(real):
        raise ValueError(f"channel_dir {str(channel_dir)!r} is not a folder: make it first (tempfile.mkdtemp())")
    if any(mark in real for mark in ",:\n\0"):
        raise ValueError(f"channel_dir {real!r} has a comma, colon or newline, which a bind mount cannot carry; "
                         "use a plainer path")
    return real


def _choose(backend: str, image: str | None) -> str:
    if backend == "auto":
        backend = os.environ.get("ENVKIT_SANDBOX", "auto")
        if backend not in BACKENDS:
            raise ValueError(f"ENVKIT_SANDBOX={backend!r} is not a sandbox backend; choose local, docker or landlock")
    if backend != "auto":
        return backend
    from .docker import docker_facilities
    from .landlock import landlock_facilities
    from .local import local_facilities
    order = [("local", local_facilities), ("docker", docker_facilities), ("landlock", landlock_facilities)]
    reasons = []
    for name, check in order if image is None else order[1:2]:
        try:
            check()
            return name
        except SandboxUnavailableError as error:
            reasons.append(f"{name}: {error}")
    raise SandboxUnavailableError("no sandbox backend here (" + "; ".join(reasons) + ")")
