"""Helpers for testing environments against a real server on 127.0.0.1.

    from envkit.testing import running_server
    with running_server(app) as url:
        with EnvClient(url).sync() as env: ...

`running_server` (from `envkit.transport.uvicorn_server`) runs uvicorn in a thread of the test process;
`ServedProcess` runs `envkit serve` in a subprocess (for tests that kill or signal the server).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from .transport.uvicorn_server import running_server

__all__ = ["running_server", "ServedProcess", "free_port"]

def free_port() -> int:
    """A 127.0.0.1 port nothing listens on right now (for a server to start on, or to find refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


_ANNOUNCE = re.compile(r"serving .* on (http://[\d.]+:\d+)")


class ServedProcess:
    """`envkit serve TARGET` in a subprocess on 127.0.0.1 and a free port.

    Example:
        with ServedProcess("echo", "--max-concurrent-envs", "4") as served:
            ... served.url ...; served.kill()
    """

    def __init__(self, target: str, *args: str, port: int = 0, startup_timeout: float = 30.0,
                 env: dict[str, str] | None = None) -> None:
        self.command = [sys.executable, "-m", "envkit.cli", "serve", target, "--port", str(port), "--log-level", "warning",
                        *args]
        self.startup_timeout = startup_timeout
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self.output: list[str] = []

    def start(self) -> ServedProcess:
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env=self.env)
        deadline = time.monotonic() + self.startup_timeout
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.output.append(line)
            match = _ANNOUNCE.search(line)
            if match:
                self.url = match.group(1)
                threading.Thread(target=self._drain, daemon=True).start()
                return self
        self.kill()
        raise RuntimeError("envkit serve did not start:\n" + "".join(self.output))

    def _drain(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)

    def kill(self) -> None:
        """SIGKILL: the server vanishes without closing its sockets cleanly."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM, then wait for a graceful exit; returns the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def __enter__(self) -> ServedProcess:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.kill()
