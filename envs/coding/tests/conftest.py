"""The coding env's tests import `coding_env` from this checkout, serve it on 127.0.0.1 and run real sandboxes
(the backend `ENVKIT_SANDBOX` names, else bubblewrap where it works, else Docker)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

ENV_DIR = Path(__file__).resolve().parents[1]
if str(ENV_DIR) not in sys.path:
    sys.path.insert(0, str(ENV_DIR))

from coding_env import CodingEnvironment  # noqa: E402

from envkit.app.targets import app_from_environment  # noqa: E402
from envkit.sandbox import Sandbox, open_sandbox  # noqa: E402
from envkit.testing import running_server  # noqa: E402


@pytest.fixture(scope="module")
def coding_url() -> Iterator[str]:
    with running_server(app_from_environment(CodingEnvironment, env_name="coding", max_concurrent_envs=8)) as url:
        yield url


@pytest.fixture
def env() -> Iterator[CodingEnvironment]:
    environment = CodingEnvironment()
    yield environment
    environment.close()


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with open_sandbox() as box:
        yield box
