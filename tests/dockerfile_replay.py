"""Replay a Dockerfile's install, start and health-check steps on this machine (no Docker engine runs here).

Replayed: the `RUN pip install ...` steps, the ENTRYPOINT/CMD start command and the HEALTHCHECK
command, with the image's `ENV` applied, `HOST=127.0.0.1` and `PORT=0` so that the server stays on
loopback on a free port. Not replayed: `FROM`, `COPY` (the folder itself is the build context),
`RUN useradd` and `USER`. `PIP_*` settings of the image are left out so pip may use its cache.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from envkit.publish.dockerfile import Instruction, image_env, install_commands, parse_dockerfile, start_command

ANNOUNCE = re.compile(r"serving .* on (http://127\.0\.0\.1:(\d+))")


class Replay:
    """One Dockerfile, replayed in `context` with the executables of `bin_dir` first on PATH."""

    def __init__(self, dockerfile: Path, context: Path, bin_dir: Path, **env: str) -> None:
        self.instructions: list[Instruction] = parse_dockerfile(dockerfile.read_text())
        self.context = context
        base = {key: value for key, value in os.environ.items() if key != "PYTHONPATH" and key != "VIRTUAL_ENV"}
        image = {key: value for key, value in image_env(self.instructions).items() if not key.startswith("PIP_")}
        self.env = {**base, **image, "PATH": f"{bin_dir}{os.pathsep}{base.get('PATH', '')}",
                    "HOST": "127.0.0.1", "PORT": "0", **env}
        self.output: list[str] = []

    def install(self) -> None:
        """Run each `RUN pip install ...` step; fails with pip's output when one fails."""
        commands = install_commands(self.instructions)
        assert commands, "the Dockerfile installs nothing with pip"
        for command in commands:
            done = subprocess.run(["sh", "-c", command], cwd=self.context, env=self.env, capture_output=True,
                                  text=True, timeout=300)
            assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"

    @contextmanager
    def started(self, *args: str, timeout: float = 60.0) -> Iterator[str]:
        """Run the start command (`args` replace CMD, as in `docker run IMAGE ARGS`) until it announces its URL."""
        process = subprocess.Popen(start_command(self.instructions, list(args) or None), cwd=self.context, env=self.env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        try:
            yield self._wait_for_announcement(lines, time.monotonic() + timeout)
        finally:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)

    def _wait_for_announcement(self, lines: queue.Queue[str | None], deadline: float) -> str:
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("the start command announced no URL in time:\n" + "".join(self.output)) from None
            if line is None:
                raise AssertionError("the start command exited:\n" + "".join(self.output))
            self.output.append(line)
            match = ANNOUNCE.search(line)
            if match:
                return match.group(1)

    def healthcheck(self, url: str) -> int:
        """Run the HEALTHCHECK command against the server at `url`; returns its exit status."""
        (check,) = [instruction.value for instruction in self.instructions if instruction.keyword == "HEALTHCHECK"]
        command = check.split(" CMD ", 1)[1]
        port = url.rsplit(":", 1)[1]
        return subprocess.run(["sh", "-c", command], env={**self.env, "PORT": port}, capture_output=True,
                              timeout=30).returncode
