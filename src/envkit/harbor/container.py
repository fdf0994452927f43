"""A task's container: a docker sandbox of the task's own image, the agent's whole world.

Unlike a plain docker sandbox, its root is writable (the agent edits `/app` and may install what the image allows),
its commands run as the image's user in the image's work folder, and file requests reach any path. What it keeps:
no new privileges, a small capability set, the task's CPUs, memory and process limits, no network unless the task's
`network_mode` is "public", the label that removes it when its server died, and its end with the session.
"""

from __future__ import annotations

import os

from ..sandbox import start_with_channel
from ..sandbox.base import CHANNEL, OVERHEAD_MB, SandboxLimits
from ..sandbox.docker import LABEL, DockerSandbox
from ..sandbox.pool import pool_for
from .images import task_image
from .tasks import HarborTask

__all__ = ["TaskContainer", "open_task_container", "task_limits"]

#: What root inside may still do: own and change its files, switch users (as package installs do), signal.
CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID")
#: Processes one container may hold.
PROCESSES = 512
#: Bytes of one command's output the host keeps.
OUTPUT_BYTES = 1_000_000


def task_limits(task: HarborTask) -> SandboxLimits:
    """The limits of the task's commands: the agent's time, the task's memory and storage."""
    longest = max(task.agent_timeout_s, task.verifier_timeout_s)
    return SandboxLimits(wall_s=task.agent_timeout_s, cpu_s=longest, memory_mb=task.memory_mb, processes=PROCESSES,
                         output_bytes=OUTPUT_BYTES, disk_mb=task.storage_mb)


class TaskContainer(DockerSandbox):
    """One session's container of a task's image."""

    confined = False

    def __init__(self, task: HarborTask, image: str, workdir: str, channel_dir: str | None = None) -> None:
        super().__init__(task_limits(task), image, channel_dir)
        self.task = task
        self.workdir = workdir

    @property
    def host_uid(self) -> int | None:
        """None: its processes run as the image's user (root for most tasks), not as a host uid of their own."""
        return None

    def _argv(self, agent: list[str]) -> list[str]:
        task, limits = self.task, self.limits
        memory = task.memory_mb + limits.disk_mb + OVERHEAD_MB   # its processes, /tmp, the agent
        assert self._facilities.docker is not None
        argv = [self._facilities.docker, "run", "-i", "--rm", "--pull", "never", "--name", self.name,
                "--label", f"{LABEL}={os.getpid()}", "--label", f"envkit.harbor.task={task.name}",
                "--network", "bridge" if task.network else "none", "--cap-drop", "ALL",
                *[f"--cap-add={capability}" for capability in CAPABILITIES], "--security-opt", "no-new-privileges", "--hostname", "task", "--memory", f"{memory}m",
                "--memory-swap", f"{memory}m", "--cpus", f"{task.cpus:g}", "--pids-limit", str(limits.processes + 2),
                "--log-driver", "none", "--tmpfs", f"/tmp:rw,exec,nosuid,nodev,size={limits.disk_mb}m,mode=1777",
                "--workdir", self.workdir, "--env", "LANG=C.UTF-8"]
        if self.channel_dir is not None:
            argv += ["--mount", f"type=bind,source={self.channel_dir},target={CHANNEL},readonly"]
        for name, value in task.environment_env.items():
            argv += ["--env", f"{name}={value}"]
        return [*argv, self.image, *agent]


def open_task_container(task: HarborTask, channel_dir: str | bool | None = None) -> TaskContainer:
    """A started container of `task` (its image built first if need be), from the task's warm pool; one with a
    channel folder (`/run/envkit`, for a loop-owning agent's model server; True: a folder of its own, removed with
    it) is started for it."""
    image, workdir = task_image(task)
    if channel_dir is not None:
        return start_with_channel(lambda folder: TaskContainer(task, image, workdir, folder), channel_dir)
    key = ("harbor", task.path, image, workdir)
    sandbox = pool_for(key, lambda: TaskContainer(task, image, workdir)).take()
    assert isinstance(sandbox, TaskContainer)
    return sandbox
