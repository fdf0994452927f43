"""The docker backend: each sandbox is a container, its supervisor the container's process 1, attached by
`docker run -i`.

By default the container has no network, a read-only root, `/work` and `/tmp` as tmpfs of `disk_mb`, all capabilities
dropped, no new privileges, a host uid of its own, and memory, CPU and process limits; a channel folder, when given,
is bound read-only at `/run/envkit`. `DockerOptions` changes that for a container that is its user's whole world
(a Harbor task's). It is removed when its supervisor exits: when the session closes its stdin, or when the server
dies (the pipe closes; `--rm`). Containers carry the label `envkit.sandbox=<owner>`, the owner naming the server
for certain (`owner.current_owner`: boot, pid namespace, pid, start time); when the next server starts it removes
those of owners provably gone, and no others: servers on other hosts or in other pid namespaces may share the engine,
and a dead server's pid may name a live process by then.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass

from .base import (CHANNEL, OVERHEAD_MB, UIDS, WORKDIR, Sandbox, SandboxLimits, SandboxUnavailableError, once,
                   total_memory_mb)
from ..owner import current_owner, owner_gone

__all__ = ["DockerSandbox", "DockerOptions", "docker_facilities", "LABEL"]

logger = logging.getLogger("envkit.sandbox")

LABEL = "envkit.sandbox"


class DockerFacilities:
    """The engine this process talks to (`DOCKER_HOST` or the default socket), checked once."""

    def __init__(self) -> None:
        self.docker = shutil.which("docker")
        if self.docker is None:
            raise SandboxUnavailableError("no docker command here (apt-get install docker.io, and an engine it "
                                          "may reach)")
        try:
            answer = self.cli("version", "--format", "{{.Server.Version}}", timeout=10)
        except subprocess.TimeoutExpired:
            answer = subprocess.CompletedProcess([], 1, "", "no answer in 10s")
        if answer.returncode != 0:
            where = os.environ.get("DOCKER_HOST") or ("/var/run/docker.sock" if os.path.exists(
                "/var/run/docker.sock") else "/var/run/docker.sock, which does not exist, and DOCKER_HOST is unset")
            raise SandboxUnavailableError(f"no Docker engine answers at {where}")
        self.version = answer.stdout.strip()
        self._images: set[str] = set()
        self._count = itertools.count()
        self._remove_orphans()

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        assert self.docker is not None
        return subprocess.run([self.docker, *args], capture_output=True, text=True, timeout=timeout)

    def check_image(self, image: str) -> None:
        """Refuse an image that is not on the engine (`docker run` would try to pull it)."""
        if image in self._images:
            return
        if self.cli("image", "inspect", "--format", "{{.Id}}", image).returncode != 0:
            raise SandboxUnavailableError(f"the Docker engine has no image {image!r}: pull, build or load it first "
                                          f"(docker pull {image})")
        self._images.add(image)
        logger.info("docker sandboxes: engine %s, image %s, no network, read-only root, uid per container",
                    self.version, image)

    def _remove_orphans(self) -> None:
        listed = self.cli("ps", "-a", "--filter", f"label={LABEL}", "--format", f'{{{{.ID}}}} {{{{.Label "{LABEL}"}}}}')
        dead = [line.split()[0] for line in listed.stdout.splitlines()
                if len(line.split()) == 2 and owner_gone(line.split()[1])]
        if dead:
            self.cli("rm", "-f", *dead)
            logger.info("removed %d sandbox containers left by servers that died", len(dead))

    def new_name(self) -> str:
        return f"envkit-sandbox-{current_owner()}-{next(self._count)}"


@once
def docker_facilities() -> DockerFacilities:
    return DockerFacilities()


@dataclass(frozen=True)
class DockerOptions:
    """How a docker sandbox's container differs from the default one (`open_sandbox(..., docker=DockerOptions())`).

    `whole_image`: the container is its user's whole world, as a Harbor task's is: a writable root, the image's own
    user, `workdir` as the image has it, and file requests that reach any path (else: a read-only root, a host uid
    of the sandbox's own, a tmpfs work folder at /work, file requests inside it). The rest is added as given:
    capabilities (after `--cap-drop ALL`), a network (the engine's bridge), CPUs, environment variables and labels.
    """

    whole_image: bool = False
    workdir: str = WORKDIR
    capabilities: tuple[str, ...] = ()
    network: bool = False
    cpus: float = 1.0
    hostname: str = "sandbox"
    env: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()


class DockerSandbox(Sandbox):
    """A container on the Docker engine, started as `options` say."""

    backend = "docker"
    #: Engines fail at tens of parallel container starts, and hosted ones limit creation to a few a second.
    CREATE_RATE = 10.0

    def __init__(self, limits: SandboxLimits, image: str, channel_dir: str | None = None,
                 options: DockerOptions = DockerOptions()) -> None:
        super().__init__(limits, channel_dir)
        self.image = image
        self.options = options
        self.workdir = options.workdir
        self.confined = not options.whole_image
        self._facilities = docker_facilities()
        self.name = self._facilities.new_name()
        self._uid = None if options.whole_image else UIDS.take()

    def _argv(self, agent: list[str]) -> list[str]:
        limits, options, uid = self.limits, self.options, self._uid
        disk = limits.disk_mb
        # the processes, the tmpfs (/tmp, and /work unless the root is writable) and the supervisor
        memory = limits.memory_mb + disk + OVERHEAD_MB if options.whole_image else total_memory_mb(limits)
        assert self._facilities.docker is not None
        argv = [self._facilities.docker, "run", "-i", "--rm", "--pull", "never", "--name", self.name,
                "--label", f"{LABEL}={current_owner()}", *[f"--label={name}={value}" for name, value in options.labels],
                "--network", "bridge" if options.network else "none", "--cap-drop", "ALL",
                *[f"--cap-add={capability}" for capability in options.capabilities],
                "--security-opt", "no-new-privileges", "--hostname", options.hostname,
                "--memory", f"{memory}m", "--memory-swap", f"{memory}m", "--cpus", f"{options.cpus:g}",
                "--pids-limit", str(limits.processes + 2), "--log-driver", "none",
                "--tmpfs", f"/tmp:rw,exec,nosuid,nodev,size={disk}m,mode=1777", "--workdir", self.workdir,
                "--env", "LANG=C.UTF-8", *[f"--env={name}={value}" for name, value in options.env]]
        if uid is not None:
            argv += ["--read-only", "--user", f"{uid}:{uid}", "--env", f"HOME={WORKDIR}",
                     "--tmpfs", f"{WORKDIR}:rw,exec,nosuid,nodev,size={disk}m,uid={uid},gid={uid},mode=0700"]
        if self.channel_dir is not None:
            argv += ["--mount", f"type=bind,source={self.channel_dir},target={CHANNEL},readonly"]
        return [*argv, self.image, *agent]

    def _kill(self) -> None:
        super()._kill()
        self._facilities.cli("rm", "-f", self.name)

    def _cleanup(self) -> None:
        if self._uid is not None:
            UIDS.give_back(self._uid)
            self._uid = None
