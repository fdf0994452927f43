"""A task's container: a docker sandbox of the task's own image, the agent's whole world.

Unlike a plain docker sandbox, its root is writable (the agent edits `/app` and may install what the image allows),
its commands run as the image's user in the image's work folder, and file requests reach any path
(`DockerOptions(whole_image=True)`). What it keeps: no new privileges, a small capability set, the task's CPUs,
memory and process limits (its commands keep the engine's rlimits, as harbor's do), /logs/agent and
/logs/verifier from the start, no network unless the task's `network_mode` is "public", the label that removes it when
its server died, and its end with the session.
"""

from __future__ import annotations

from ..sandbox import DockerOptions, Sandbox, SandboxLimits, open_sandbox
from .images import task_image
from .tasks import HarborTask

__all__ = ["open_task_container", "task_limits", "task_options"]

#: What root inside may still do: own and change its files, switch users (as package installs do), signal.
CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID")
#: Processes one container may hold.
PROCESSES = 512
#: The folders harbor gives the agent and the tests from the start (its job folder's, mounted).
LOG_DIRS = ("/logs/agent", "/logs/verifier")
#: Bytes of one command's output the host keeps.
OUTPUT_BYTES = 1_000_000


def task_limits(task: HarborTask) -> SandboxLimits:
    """The limits of the task's commands: the agent's time, the task's memory and storage."""
    longest = max(task.agent_timeout_s, task.verifier_timeout_s)
    return SandboxLimits(wall_s=task.agent_timeout_s, cpu_s=longest, memory_mb=task.memory_mb, processes=PROCESSES,
                         output_bytes=OUTPUT_BYTES, disk_mb=task.storage_mb)


def task_options(task: HarborTask, workdir: str) -> DockerOptions:
    """How the task's container differs from a plain docker sandbox's."""
    return DockerOptions(whole_image=True, workdir=workdir, capabilities=CAPABILITIES, network=task.network,
                         cpus=task.cpus, hostname="task", env=tuple(task.environment_env.items()),
                         labels=(("envkit.harbor.task", task.name),))


def open_task_container(task: HarborTask, channel_dir: str | bool | None = None) -> Sandbox:
    """A started container of `task` (its image built first if need be), from the task's warm pool; one with a
    channel folder (`/run/envkit`, for a loop-owning agent's model server; True: a folder of its own, removed with
    it) is started for it."""
    image, workdir = task_image(task)
    box = open_sandbox("docker", limits=task_limits(task), image=image, channel_dir=channel_dir,
                       docker=task_options(task, workdir))
    box.run(["mkdir", "-p", *LOG_DIRS])   # harbor mounts them before the agent's turn
    return box
