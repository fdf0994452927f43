"""A small environment whose tools run commands and move files in a sandbox of its own (the attack tests' target).

The backend comes from `ENVKIT_SANDBOX` (local or docker); the sandbox opens at the first tool call and closes in
`close()`, so it lives and dies with the session.
"""

from __future__ import annotations

import json
from typing import Any

from envkit import Action, Environment, Observation, State, tool
from envkit.sandbox import Sandbox, SandboxError, SandboxLimits, open_sandbox

#: Tight limits, so that every attack ends within seconds.
LIMITS = SandboxLimits(wall_s=5, cpu_s=2, memory_mb=128, processes=32, output_bytes=100_000, disk_mb=16)


class ShellAction(Action):
    command: str = "true"


class ShellObservation(Observation):
    output: str = ""


class SandboxEnvironment(Environment[ShellAction, ShellObservation, State]):
    """Runs what it is told in its session's sandbox; tool results are JSON."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    ALLOWS_STEP_BEFORE_RESET = True
    TASKS = {"train": [{}]}

    def __init__(self) -> None:
        self._sandbox: Sandbox | None = None

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = open_sandbox(limits=LIMITS)
        return self._sandbox

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ShellObservation:
        return ShellObservation(output="ready")

    def step(self, action: ShellAction) -> ShellObservation:
        return ShellObservation(output=self.run(action.command))

    @property
    def state(self) -> State:
        return State()

    @tool
    def run(self, command: str, timeout_s: float = 5.0) -> str:
        """Run a shell command in the sandbox.

        Args:
            command: the command line.
            timeout_s: seconds it may take.
        """
        result = self.sandbox.run(command, timeout_s=timeout_s)
        return json.dumps({"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr,
                           "timed_out": result.timed_out, "truncated": result.truncated})

    @tool
    def write(self, path: str, content: str) -> str:
        """Write a file in the sandbox's work folder.

        Args:
            path: where, relative to the work folder.
            content: the text to write.
        """
        try:
            self.sandbox.write_file(path, content)
        except SandboxError as error:
            return f"refused: {error}"
        return "written"

    @tool
    def read(self, path: str) -> str:
        """Read a file of the sandbox's work folder.

        Args:
            path: which, relative to the work folder.
        """
        try:
            return self.sandbox.read_file(path).decode(errors="replace")
        except SandboxError as error:
            return f"refused: {error}"

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
