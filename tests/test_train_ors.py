"""`envkit train` over the Open Reward Standard and on task splits, against envkit servers on 127.0.0.1.

Offline: HF_HUB_OFFLINE=1; the tiny model is built here. The openreward-SDK server case is in
tests/test_ors_clients.py (it needs the openreward venv).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from envkit.app.targets import app_from_environment, resolve_target
from envkit.testing import running_server
from envkit.play.tasks import task_rows
from envkit.train.runner import run
from envkit.train.settings import TrainSettings


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def served(name: str, sessions: int = 16):
    target = resolve_target(name)
    return running_server(app_from_environment(target.env_class, env_name=name, max_concurrent_envs=sessions))


def test_train_over_ors_on_an_envkit_server_uses_the_split_and_deletes_every_session(tmp_path: Path) -> None:
    with served("echo") as url:
        summary = run(TrainSettings(env=[], env_url=[url], protocol="ors", split="test", train_on_test=True,
                                    max_steps=2, batch_size=4, num_generations=2, output_dir=str(tmp_path),
                                    save_model=False),
                      say=lambda _: None, show_steps=False)
        health = httpx.get(url + "/health").json()
    assert summary.steps == 2 and summary.episodes == 8 and summary.lost == 0 and summary.tool_calls > 0
    assert health["active_sessions"] == 0


def test_task_rows_interleave_environments_and_cycle_or_take_every_task_once() -> None:
    prompts = {"a": "A?", "b": "B?"}
    tasks = {"a": [{"x": 1}, {"x": 2}, {"x": 3}], "b": [{"y": 1}]}
    every = task_rows(prompts, tasks, None)
    assert [(row["environment"], row.get("x", row.get("y"))) for row in every] == [("a", 1), ("b", 1), ("a", 2),
                                                                                    ("a", 3)]
    assert [row.get("x", row.get("y")) for row in task_rows(prompts, tasks, 6)] == [1, 1, 2, 1, 3, 1]
    assert every[0]["prompt"] == [{"role": "user", "content": "A?"}]


def test_train_split_rows_are_the_wordle_tasks_without_the_secret(tmp_path: Path) -> None:
    from envkit.play.binding import bind
    from envkit.train.runner import _tasks

    with served("wordle") as url:
        classes = {"wordle": bind(url, name="wordle")}
        tasks = _tasks(TrainSettings(split="test"), classes)
    rows = task_rows({"wordle": "Play."}, tasks, None)
    assert len(rows) == 35 and all(set(row) == {"prompt", "secret_index"} for row in rows)


def test_unknown_split_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "envkit.cli", "train", "--env", "wordle", "--split", "dev",
                           "--max-steps", "1", "--output-dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert "--split dev: wordle has no such split; its splits: train, test" in done.stderr
    assert "Traceback" not in done.stderr
