"""Catch's tests import `catch_env` from this checkout and serve it on 127.0.0.1."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

ENV_DIR = Path(__file__).resolve().parents[1]
if str(ENV_DIR) not in sys.path:
    sys.path.insert(0, str(ENV_DIR))

from catch_env import CatchEnvironment  # noqa: E402

from envkit.app.targets import app_from_environment  # noqa: E402
from envkit.testing import running_server  # noqa: E402


@pytest.fixture
def catch_url() -> Iterator[str]:
    with running_server(app_from_environment(CatchEnvironment, env_name="catch", max_concurrent_envs=8)) as url:
        yield url
