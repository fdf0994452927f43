"""Reading Dockerfiles: instructions, the environment they set, the command they start, and the Space shape.

Every envkit image has the same shape: a non-root user, `envkit serve` as the start command on
`$HOST:$PORT`, a `HEALTHCHECK` on `/health`, and (for an env's Space) an install step that takes
envkit from the staged `wheels/` folder. `space_dockerfile_problems` says what a Dockerfile lacks.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Instruction", "parse_dockerfile", "image_env", "start_command", "install_commands",
           "space_dockerfile_problems"]


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction: its keyword (upper case), its text, and its line number."""

    keyword: str
    value: str
    line: int

    def exec_form(self) -> list[str] | None:
        """The JSON-array arguments of `CMD`/`ENTRYPOINT`/`RUN`, or None for the shell form."""
        if self.value.startswith("["):
            try:
                parsed = json.loads(self.value)
            except json.JSONDecodeError:
                return None
            if isinstance(parsed, list) and all(isinstance(item, str) for item in parsed):
                return parsed
        return None


def parse_dockerfile(text: str) -> list[Instruction]:
    """Split a Dockerfile into instructions, joining `\\`-continued lines and dropping comments."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending.append(line[:-1].strip())
            continue
        pending.append(line)
        joined = " ".join(part for part in pending if part)
        pending = []
        keyword, _, value = joined.partition(" ")
        instructions.append(Instruction(keyword.upper(), value.strip(), start))
    return instructions


def image_env(instructions: list[Instruction]) -> dict[str, str]:
    """The variables the `ENV` instructions set (both `ENV A=1 B=2` and `ENV A 1`)."""
    env: dict[str, str] = {}
    for instruction in instructions:
        if instruction.keyword != "ENV":
            continue
        words = shlex.split(instruction.value)
        if words and "=" not in words[0]:
            env[words[0]] = " ".join(words[1:])
            continue
        for word in words:
            name, _, value = word.partition("=")
            env[name] = value
    return env


def start_command(instructions: list[Instruction], args: list[str] | None = None) -> list[str]:
    """The argv the container starts with: the last `ENTRYPOINT` followed by the last `CMD`.

    `args` replace the `CMD`, as the arguments of `docker run IMAGE ARGS...` do.
    """
    argv: dict[str, list[str]] = {}
    for instruction in instructions:
        if instruction.keyword in ("CMD", "ENTRYPOINT"):
            exec_form = instruction.exec_form()
            argv[instruction.keyword] = exec_form if exec_form is not None else ["/bin/sh", "-c", instruction.value]
    return argv.get("ENTRYPOINT", []) + (argv.get("CMD", []) if args is None else args)


def install_commands(instructions: list[Instruction]) -> list[str]:
    """The shell commands of the `RUN` steps that install Python packages with pip."""
    commands = []
    for instruction in instructions:
        if instruction.keyword == "RUN":
            exec_form = instruction.exec_form()
            command = shlex.join(exec_form) if exec_form is not None else instruction.value
            if re.search(r"\bpip3?\s+install\b", command):
                commands.append(command)
    return commands


def space_dockerfile_problems(path: Path, app_port: int | None) -> list[str]:
    """What the Dockerfile of an env's Space lacks, each with its fix; empty when it has the envkit shape."""
    instructions = parse_dockerfile(path.read_text())
    keywords = [instruction.keyword for instruction in instructions]
    problems: list[str] = []
    if "FROM" not in keywords:
        problems.append("no FROM line; start from a Python image, e.g. `FROM python:3.11-slim`")
    installs = install_commands(instructions)
    if not any("wheels/" in command for command in installs):
        problems.append("no `RUN pip install wheels/*.whl .` step; the Space must install envkit from the wheel "
                        "that `envkit push` stages in wheels/ (envkit is not on PyPI)")
    users = [instruction.value.split(":")[0] for instruction in instructions if instruction.keyword == "USER"]
    if not users or users[-1] in ("root", "0"):
        problems.append("the server would run as root; add `RUN useradd --create-home --uid 1000 envkit` and "
                        "`USER envkit` before the start command")
    healthchecks = [instruction.value for instruction in instructions if instruction.keyword == "HEALTHCHECK"]
    if not healthchecks or "/health" not in healthchecks[-1]:
        problems.append("no HEALTHCHECK on /health; add one that fetches http://127.0.0.1:$PORT/health")
    command = " ".join(start_command(instructions))
    if "envkit serve" not in command:
        problems.append("the start command does not run `envkit serve`; end with "
                        "`CMD [\"sh\", \"-c\", \"exec envkit serve . --host \\\"$HOST\\\" --port \\\"$PORT\\\"\"]`")
    elif "--host" not in command:
        problems.append("`envkit serve` listens on 127.0.0.1 unless given --host; pass `--host 0.0.0.0` "
                        "(or `--host \"$HOST\"` with `ENV HOST=0.0.0.0`) so the Space can reach it")
    if app_port is not None:
        exposed = {port.split("/")[0] for instruction in instructions if instruction.keyword == "EXPOSE"
                   for port in instruction.value.split()}
        if str(app_port) not in exposed:
            problems.append(f"app_port {app_port} (README front matter) is not EXPOSEd; add `EXPOSE {app_port}`")
        port_env = image_env(instructions).get("PORT")
        if port_env is not None and port_env != str(app_port):
            problems.append(f"ENV PORT={port_env} differs from app_port {app_port} in the README front matter; "
                            "make them equal")
    return problems
