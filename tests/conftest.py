"""Shared fixtures: real servers on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import time
import venv
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from envkit import create_app
from envkit.app.targets import resolve_target
from envkit.testing import running_server

TESTS_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS_DIR))

from sample_envs import CounterAction, CounterEnvironment, CounterObservation  # noqa: E402


def needs_fast_path(name: str) -> None:
    """Skip a test that watches the fast path `name` at work (`envkit.transport.fast`) where it is off: with
    `ENVKIT_FAST_PATHS=0`, or where its start-up check found what it relies on changed."""
    from envkit.transport.fast import fast_paths

    paths = fast_paths()
    if not getattr(paths, name):
        pytest.skip(f"the {name} fast path is off here ({paths.describe()})")


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for server subprocesses: sample_envs importable."""
    path = os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


@pytest.fixture
def echo_url() -> Iterator[str]:
    target = resolve_target("echo")
    app = create_app(target.env_class, target.action_cls, target.observation_cls, max_concurrent_envs=64)
    with running_server(app) as url:
        yield url


@pytest.fixture
def counter_url() -> Iterator[str]:
    app = create_app(CounterEnvironment, CounterAction, CounterObservation, max_concurrent_envs=8,
                     max_message_bytes=4096)
    with running_server(app) as url:
        yield url


REPO = TESTS_DIR.parent


def third_party_python(name: str, requirement: str, module: str, override: str, *, sees_runner: bool = False,
                       base_python: str | None = None) -> str:
    """The python of a third-party client's own venv: `$override` if set, else `benchmarks/.venv-NAME`,
    created and `pip install`ed on first use (reused as it is afterwards).

    `sees_runner`: the venv also sees the packages of the interpreter running the tests (torch, trl, envkit),
    for clients that must run beside them; its own packages come first. That interpreter's site-packages is added
    as a site folder, so its `.pth` files (an editable envkit's among them) are read too; it is written on every
    call, so a venv made under another runner follows the current one.
    `base_python`: the interpreter the venv is made from (`python -m venv`), for packages that need another Python
    than the one running the tests; by default that one.
    """
    configured = os.environ.get(override)
    if configured:
        return configured
    home = REPO / "benchmarks" / f".venv-{name}"
    python = home / "bin" / "python"
    if not python.exists():
        if base_python:
            subprocess.run([base_python, "-m", "venv", str(home)], check=True)
        else:
            venv.create(home, with_pip=True)
    if sees_runner:
        site = next(home.glob("lib/python*/site-packages"))
        runner = sysconfig.get_paths()["purelib"]
        (site / "_runner_site.pth").write_text(f"import site; site.addsitedir({runner!r})\n")
    if subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", requirement], check=True)
    return str(python)


@pytest.fixture(scope="session")
def openenv_python() -> str:
    """OpenEnv 0.10.0's venv (`$ENVKIT_OPENENV_PYTHON`, else benchmarks/.venv-openenv)."""
    return third_party_python("openenv", "openenv==0.10.0", "openenv", "ENVKIT_OPENENV_PYTHON")


@pytest.fixture(scope="session")
def mcp1_python() -> str:
    """The `mcp` SDK 1.x (`$ENVKIT_MCP1_PYTHON`, else benchmarks/.venv-mcp1; 1.30.0, as openenv 0.10.0 resolves)."""
    return third_party_python("mcp1", "mcp==1.30.0", "mcp", "ENVKIT_MCP1_PYTHON")


@pytest.fixture(scope="session")
def mcp2_python() -> str:
    """The `mcp` SDK 2.x (`$ENVKIT_MCP2_PYTHON`, else benchmarks/.venv-mcp2)."""
    return third_party_python("mcp2", "mcp==2.3.0", "mcp", "ENVKIT_MCP2_PYTHON")


@contextmanager
def chat_server_process(command: list[str], port: int, log_path: Path, *, env: dict[str, str],
                        start_timeout: float) -> Iterator[str]:
    """Run an OpenAI-compatible server (`transformers serve`, vLLM's) on 127.0.0.1:`port` until the block ends;
    yields its root URL once `/health` answers 200. Its output goes to `log_path`, shown if it does not start."""
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        root = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + start_timeout
            while True:
                try:
                    if httpx.get(root + "/health", trust_env=False, timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{command[0]} did not start: {log_path.read_text()[-4000:]}")
                time.sleep(0.5)
            yield root
        finally:
            process.terminate()
            process.wait(timeout=60)
