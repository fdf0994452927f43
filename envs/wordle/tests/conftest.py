"""Wordle's tests import `wordle_env` from this checkout and serve it on 127.0.0.1."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

ENV_DIR = Path(__file__).resolve().parents[1]
if str(ENV_DIR) not in sys.path:
    sys.path.insert(0, str(ENV_DIR))

from wordle_env import WordleEnvironment  # noqa: E402

from envkit.app.targets import app_from_environment  # noqa: E402
from envkit.testing import running_server  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "golden" / "textarena_transcripts.json"


@pytest.fixture(scope="session")
def textarena_reference() -> dict[str, Any]:
    """Transcripts recorded from TextArena 0.7.4's Wordle-v0 with our word lists (golden/record_textarena.py)."""
    return json.loads(GOLDEN.read_text())


@pytest.fixture
def wordle_url() -> Iterator[str]:
    with running_server(app_from_environment(WordleEnvironment, env_name="wordle", max_concurrent_envs=8)) as url:
        yield url
