"""`envkit train` end to end on CPU: the tiny model, TRL's GRPOTrainer, and environments really served.

Offline: HF_HUB_OFFLINE=1; the tiny model and its tokenizer are built here from nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from envkit import EnvClient
from envkit.app.targets import app_from_environment, resolve_target
from envkit.testing import ServedProcess, free_port, running_server
from envkit.train.runner import TrainingStopped, prepare, run, train
from envkit.train.settings import TrainSettings


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

#: Every batch's episode rewards, as the reward functions saw them (filled by `record`).
SEEN: list[list[float | None]] = []
#: Every batch's environments (filled by `record`).
PLAYED: list[list[Any]] = []


def record(environments: list[Any], **kwargs: Any) -> list[float]:
    """A zero-weight reward function that writes down the environment rewards the trainer scored."""
    SEEN.append([None if e.episode.lost else e.episode.reward for e in environments])
    PLAYED.append([(e.env_name, dict(e.episode.row), list(e.episode.texts)) for e in environments])
    return [0.0] * len(environments)


def settled_sessions(url: str) -> int:
    """Open sessions on the server once closing has settled (bounded wait)."""
    for _ in range(100):
        active = EnvClient(url).sync().health()["active_sessions"]
        if active == 0:
            break
        time.sleep(0.05)
    return active


def rows_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_grpo_steps_against_a_served_echo(tmp_path: Path) -> None:
    SEEN.clear()
    target = resolve_target("echo")
    with running_server(app_from_environment(target.env_class, env_name="echo", max_concurrent_envs=64)) as url:
        settings = TrainSettings(env=["echo"], env_url=[url], max_steps=3, output_dir=str(tmp_path / "out"),
                                 reward=["env", "test_train_e2e:record=0"]).resolved()
        prepared = prepare(settings, {"echo": url}, say=lambda message: None, show_steps=False)
        summary = train(prepared)
        assert settled_sessions(url) == 0
        # the saved model trains again as any local model does: loaded by TRL from its folder
        again = TrainSettings(env=["echo"], env_url=[url], model=str(tmp_path / "out" / "model"), max_steps=1,
                              max_completion_length=128, enable_thinking=False, output_dir=str(tmp_path / "again"),
                              save_model=False).resolved()
        assert train(prepare(again, {"echo": url}, say=lambda message: None, show_steps=False)).steps == 1
        assert settled_sessions(url) == 0

    rows = rows_of(tmp_path / "out" / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2, 3] and summary.steps == 3
    assert summary.tool_calls > 0 and sum(row["tool_calls_per_episode"] for row in rows) > 0
    assert summary.episodes == 3 * 32 and summary.lost == 0
    for row, seen in zip(rows, SEEN, strict=True):  # the trainer's reward is the environment's, episode by episode
        assert row["reward"] == pytest.approx(sum(seen) / len(seen), abs=1e-4)
        assert row["echo_reward"] == pytest.approx(row["reward"], abs=1e-4)
    assert any(row["reward"] > 0 for row in rows)
    assert (tmp_path / "out" / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "out" / "metrics.csv").read_text().startswith("step,reward,")
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen3_chat_template

    saved = AutoTokenizer.from_pretrained(tmp_path / "out" / "model")
    assert saved.chat_template == qwen3_chat_template  # TRL (and vLLM) recognise the saved tiny model's template
    assert "waiting for the environment" in summary.table()


def test_the_default_command_trains_and_reports(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "envkit.cli", "train", "--max-steps", "2", "--json"],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["steps"] == 2 and summary["episodes"] == 64 and summary["lost"] == 0
    assert "reward" in summary["start"] and "echo_reward" in summary["end"]
    assert "serving echo on http://127.0.0.1:" in result.stderr
    assert "step    2/2  reward" in result.stderr
    out = tmp_path / "envkit-train"
    assert (out / "model" / "config.json").is_file() and (out / "reward_curve.png").is_file()
    assert len(rows_of(out / "metrics.jsonl")) == 2


def test_two_environments_routed_per_row_from_a_dataset(tmp_path: Path) -> None:
    PLAYED.clear()
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("\n".join(json.dumps(row) for row in [
        {"environment": "wordle", "word": "crane"}, {"environment": "wordle", "word": "slate"},
        {"environment": "catch", "ball_column": 0}, {"environment": "catch", "ball_column": 4}]) + "\n")
    summary = run(TrainSettings(env=["wordle", "catch"], dataset=str(dataset), max_steps=2,
                                output_dir=str(tmp_path / "out"), save_model=False,
                                reward=["env", "wordle.partial=0.5", "test_train_e2e:record=0"]),
                  say=lambda message: None, show_steps=False)
    assert summary.steps == 2 and summary.episodes == 64
    played = [episode for batch in PLAYED for episode in batch]
    assert {name for name, _, _ in played} == {"wordle", "catch"}
    for name, row, texts in played:  # each row reached its own environment's reset, and only its columns
        if name == "wordle":
            assert row in ({"word": "crane"}, {"word": "slate"}) and "You are Playing Wordle" in texts[0]
        else:
            assert row in ({"ball_column": 0}, {"ball_column": 4})
            assert f"Ball (o): row 1 of 10, column {row['ball_column'] + 1} of 5" in texts[0]
    rows = rows_of(tmp_path / "out" / "metrics.jsonl")
    for column in ("wordle_reward", "catch_reward", "wordle_partial"):  # a reward per environment
        assert any(row.get(column) is not None for row in rows), column


def test_a_server_killed_mid_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed mid-step, restarted: the run counts the lost episodes and goes on. Killed for good: it stops with a
    clear error and keeps what it did. It never steps a game it did not reset (no NOT_RESET from the server)."""
    SEEN.clear()
    port = str(free_port())
    first = ServedProcess("echo", "--port", port).start()
    second = ServedProcess("echo", "--port", port)
    try:
        settings = TrainSettings(env=["echo"], env_url=[first.url], max_steps=8, output_dir=str(tmp_path / "out"),
                                 reconnect_timeout=30, reward=["env", "test_train_e2e:record=0"]).resolved()
        prepared = prepare(settings, {"echo": first.url}, say=lambda message: None, show_steps=False)
        tally, bound = prepared.tally, prepared.classes["echo"]
        call = bound._call
        # a batch's tool calls run at once on threads of their own: each kill happens once, at the first call that
        # sees the count reached (several may run between two increments)
        kill_first, kill_second = threading.Lock(), threading.Lock()

        def sabotaged_call(self: Any, tool: str, arguments: dict[str, Any]) -> str:
            """Kill the servers at set points, from the calling thread (so the timing is exact)."""
            if tally.tool_calls >= 3 and kill_first.acquire(blocking=False):  # in the first step
                first.kill()
                threading.Thread(target=second.start, daemon=True).start()  # back while the run waits in reset
            elif (tally.episodes > 2 * 32 and second.url and second.process.poll() is None
                  and kill_second.acquire(blocking=False)):  # in the third step
                bound.reconnect_timeout = 1  # no waiting 30s for a server that will not come back
                second.kill()
            return call(self, tool, arguments)

        monkeypatch.setattr(bound, "_call", sabotaged_call)
        with pytest.raises(TrainingStopped, match="the environment server stopped answering") as stopped:
            train(prepared)
    finally:
        first.kill()
        second.kill()

    summary = stopped.value.summary
    assert summary.steps == 3 and summary.lost >= 2  # the third step ends with episodes lost; the fourth cannot start
    assert "NOT_RESET" not in tally.error_codes  # no call ever reached a session that had not been reset
    rows = rows_of(tmp_path / "out" / "metrics.jsonl")
    assert rows[0]["episodes_lost"] >= 1 and rows[-1]["episodes_lost"] <= tally.lost
    assert None in SEEN[0]  # the lost episodes of the first step were unscored
    assert None not in SEEN[1]  # the second step ran whole on the restarted server
    assert None in SEEN[2]
    assert (tmp_path / "out" / "reward_curve.png").is_file() and (tmp_path / "out" / "model" / "config.json").is_file()
    assert "stopped early: the environment server stopped answering" in summary.table()
    assert "lost because: connection dropped" in summary.table()


def test_report_to_trackio_logs_the_rewards_locally(tmp_path: Path) -> None:
    """trackio writes to a local SQLite file under TRACKIO_DIR; nothing is sent anywhere (HF_HUB_OFFLINE=1)."""
    pytest.importorskip("trackio")
    import sqlite3

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRACKIO_DIR": str(tmp_path / "trackio")}
    result = subprocess.run([sys.executable, "-m", "envkit.cli", "train", "--max-steps", "2", "--report-to", "trackio",
                             "--output-dir", "run-a", "--json"], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    with sqlite3.connect(tmp_path / "trackio" / "envkit-echo.db") as database:
        logged = [(run, json.loads(metrics)) for run, metrics in database.execute("SELECT run_name, metrics FROM metrics")]
    rewards = [metrics["train/reward"] for run, metrics in logged if run == "run-a" and "train/reward" in metrics]
    assert rewards == pytest.approx([row["reward"] for row in rows_of(tmp_path / "run-a" / "metrics.jsonl")], abs=1e-4)
