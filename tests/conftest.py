"""Shared fixtures: real servers on 127.0.0.1."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

from envkit import create_app
from envkit.serving import resolve_target
from envkit.testing import running_server

TESTS_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS_DIR))

from sample_envs import CounterAction, CounterEnvironment, CounterObservation  # noqa: E402


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
