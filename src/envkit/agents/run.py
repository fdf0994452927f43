"""Running a loop-owning agent in a sandbox, with its model calls going to the host's server through the channel.

The sandbox has no network. Its channel folder (`open_sandbox(channel_dir=...)`) holds the unix socket a model
server listens on (the capture proxy's, `<channel_dir>/proxy.sock`); `envkit-forward` (`forward.py`) relays
`127.0.0.1:PORT` inside the sandbox to it, so an unmodified agent with `OPENAI_BASE_URL=http://127.0.0.1:PORT/v1`
reaches that server and nothing else. The relay starts in the same command as the agent and ends with it.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Mapping, Protocol

from ..sandbox import CHANNEL, RunResult, Sandbox, SandboxError

__all__ = ["run_agent", "reference_command", "install", "PORT", "SOCKET_NAME", "INSIDE"]

#: The port the relay listens on inside the sandbox.
PORT = 8080
#: The model server's socket in the channel folder, as the capture proxy names it.
SOCKET_NAME = "proxy.sock"
#: Where envkit's own files go inside the sandbox (its private /tmp, outside the agent's work folder).
INSIDE = "/tmp/envkit"
#: Characters of the agent's output its result keeps (the end of longer output).
TAIL_CHARS = 8000
#: Bytes of the command line, and of the variables, the sandbox's kernel takes as one argument (MAX_ARG_STRLEN).
MAX_ARGUMENT_BYTES = 131_071
#: The files `install` writes: the relay and the reference agent.
SHIPPED = ("forward.py", "reference.py")


class HasApiKey(Protocol):
    """A model server's session: `envkit.capture`'s `CaptureSession`, or anything with its key."""

    api_key: str


@cache
def _source(name: str) -> str:
    return (Path(__file__).parent / name).read_text()


def install(sandbox: Sandbox) -> None:
    """Write the relay and the reference agent into the sandbox's `INSIDE` folder (again if the agent removed them)."""
    files = {name: _source(name) for name in SHIPPED}
    writer = ("import json, os, sys\nos.makedirs(sys.argv[1], exist_ok=True)\n"
              "for name, text in json.load(sys.stdin).items():\n"
              "    open(os.path.join(sys.argv[1], name), 'w').write(text)\n")
    done = sandbox.run(["python3", "-I", "-S", "-c", writer, INSIDE], stdin=json.dumps(files), timeout_s=30)
    if not done.ok:
        raise SandboxError(f"could not write envkit's agent files into the sandbox: {done.stderr.strip()[-500:]}")


def reference_command(instruction: str, *, max_turns: int = 8, model: str = "envkit",
                      command_timeout_s: float = 30.0) -> str:
    """The command line that runs the bundled `reference` agent on `instruction` (`run_agent` installs it)."""
    return shlex.join(["python3", "-I", f"{INSIDE}/reference.py", instruction, "--max-turns", str(max_turns),
                       "--model", model, "--command-timeout", f"{command_timeout_s:g}"])


def run_agent(sandbox: Sandbox, command: str, *, session: HasApiKey | None = None, api_key: str | None = None,
              socket_path: str | None = None, timeout_s: float, env: Mapping[str, str] | None = None,
              port: int = PORT) -> RunResult:
    """Run the agent `command` (a shell command line) in `sandbox`'s work folder, its model calls relayed to the
    unix socket `socket_path` (default `<channel_dir>/proxy.sock`), which a server must already listen on.

    The command sees `OPENAI_BASE_URL=http://127.0.0.1:PORT/v1` (and `OPENAI_API_BASE`, the older name) and
    `OPENAI_API_KEY` set to `session.api_key` (or `api_key`), plus `env`. Everything it starts ends with it, or at
    `timeout_s`. The sandbox must have been opened with a channel folder, with limits that let the agent run that long
    (`SandboxLimits.cpu_s` bounds each process's CPU time, the agent's own included).
    """
    if (session is None) == (api_key is None):
        raise ValueError("run_agent takes the model server's session or its api_key (one of them)")
    key = session.api_key if session is not None else api_key
    if not isinstance(key, str) or not key:
        raise ValueError(f"the api key must be a non-empty string; got {key!r}")
    if not isinstance(command, str) or not command.strip():
        raise ValueError(f"the agent's command must be a non-empty shell command line; got {command!r}")
    if sandbox.channel_dir is None:
        raise ValueError("the sandbox has no channel folder: open it with open_sandbox(channel_dir=...)")
    encoded = _variables(env or {}, key, port)
    for what, text in (("the command line", command), ("env", encoded)):
        if len(text.encode()) > MAX_ARGUMENT_BYTES:
            raise ValueError(f"{what} is {len(text.encode())} bytes, more than one argument may hold "
                             f"({MAX_ARGUMENT_BYTES}): put long text in a file in the sandbox and pass its path")
    path = socket_path or os.path.join(sandbox.channel_dir, SOCKET_NAME)
    sandbox.admit(path)
    install(sandbox)
    argv = ["python3", "-I", "-S", f"{INSIDE}/forward.py", str(port), f"{CHANNEL}/{os.path.basename(path)}", encoded,
            "--", "/bin/sh", "-c", command]
    done = sandbox.run(argv, timeout_s=timeout_s)
    cut = len(done.stdout) > TAIL_CHARS or len(done.stderr) > TAIL_CHARS
    return replace(done, stdout=done.stdout[-TAIL_CHARS:], stderr=done.stderr[-TAIL_CHARS:],
                   truncated=done.truncated or cut)


def _variables(env: Mapping[str, str], key: str, port: int) -> str:
    """The agent's environment variables as JSON: `env`, checked, and the model server's address and key."""
    for name, value in env.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name or not isinstance(value, str) \
                or "\0" in value:
            raise ValueError(f"env holds names and values that are strings (a name without '='); got {name!r}: "
                             f"{value!r}")
    base_url = f"http://127.0.0.1:{port}/v1"
    return json.dumps({**env, "OPENAI_BASE_URL": base_url, "OPENAI_API_BASE": base_url, "OPENAI_API_KEY": key})
