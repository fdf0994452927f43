"""The real Open Reward Standard clients against `envkit serve wordle`: the openreward 0.1.167 SDK and TRL 1.16's
`OpenRewardSpec`, each run in a subprocess of their own virtual environment.

The venv is `$ENVKIT_OPENREWARD_PYTHON` if set, else `benchmarks/.venv-openreward`, created here on first use
(pip install openreward==0.1.167). It also sees the packages of the Python running the tests (a `.pth` file), so
TRL, torch and envkit come from there; its own openreward dependencies come first. Everything is offline:
the SDK's update check is off, and the tiny policy is built locally (envkit.play.tiny).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from envkit.app.targets import resolve_target
from envkit.client.ors_client import is_ors_server
from envkit.testing import ServedProcess, free_port

from conftest import third_party_python

REPO = Path(__file__).resolve().parents[1]
PEER = Path(__file__).resolve().parent / "openreward_peer"
OPENREWARD = "openreward==0.1.167"


@pytest.fixture(scope="session")
def openreward_python() -> str:
    """openreward's venv (`$ENVKIT_OPENREWARD_PYTHON`, else benchmarks/.venv-openreward), seeing trl and torch too."""
    return third_party_python("openreward", OPENREWARD, "openreward", "ENVKIT_OPENREWARD_PYTHON", sees_runner=True)


def peer_env(url: str) -> dict[str, str]:
    """What the SDK needs to reach one self-hosted server (no catalogue, no update check), offline."""
    path = os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "PYTHONPATH": path, "OPENREWARD_API_URL": url, "OPENREWARD_SESSION_URL": url,
            "OPENREWARD_DISABLE_UPDATE_CHECK": "1", "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}


def run_peer(python: str, url: str, script: str, *args: str, timeout: float = 240) -> dict:
    done = subprocess.run([python, str(PEER / script), url, *args], capture_output=True, text=True,
                          timeout=timeout, env=peer_env(url))
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def wordle_secret(split: str, index: int) -> str:
    env_class = resolve_target("wordle").env_class
    from wordle_env.words import secret_words

    return secret_words()[env_class.task(split, index)["secret_index"]]


def test_openreward_sdk_lists_tasks_and_plays_wordle_on_envkit_serve(openreward_python: str) -> None:
    with ServedProcess("wordle", "--max-concurrent-envs", "8") as served:
        report = run_peer(openreward_python, served.url, "sdk_wordle.py", wordle_secret("train", 0))
        health = httpx.get(served.url + "/health").json()
    assert report["splits"] == ["train", "test"] and report["num_test"] == 35
    assert len(report["test_tasks"]) == 35 and all(set(task) == {"secret_index"} for task in report["test_tasks"])
    assert report["task"] == {"secret_index": 1} and len(report["task_range"]) == 3
    (name, schema), = report["tools"]
    assert name == "guess" and schema["required"] == ["guess"]
    assert report["prompt"][0].startswith("[GAME] You are Playing Wordle.")
    assert report["messages"] == [["user", report["prompt"]]] and report["session_tools"] == ["guess"]
    assert report["unknown_tool"]["reason"] == "not_found" and "shout" in report["unknown_tool"]["detail"]
    assert report["wrong_arguments"]["reason"] == "input_validation"
    assert report["first"]["reward"] == 0.0 and report["first"]["finished"] is False
    assert "Feedback:" in report["first"]["text"][0]
    assert report["first"]["metadata"]["reward_components"]["win"] == 0.0
    assert report["win"] == {"text": report["win"]["text"], "reward": 1.0, "finished": True}
    assert report["after_finished"]["reason"] == "episode_finished"
    assert report["version"]["server"] == "envkit"
    assert report["after_delete"]["type"] == "SessionTerminatedError"
    assert "deleted by the client" in report["after_delete"]["detail"]
    assert report["bad_index"] == {"type": "ClientResponseError", "status": 404,
                                   "detail": "WordleEnvironment split 'test' has tasks 0 to 34; got index 999"}
    assert report["bad_split"]["status"] == 404 and "no split 'nope'" in report["bad_split"]["detail"]
    assert health["active_sessions"] == 0   # the SDK's sessions were deleted and their slots are free


def test_openreward_sdk_at_capacity_is_retried_then_refused_and_the_open_session_carries_on(
        openreward_python: str) -> None:
    with ServedProcess("wordle", "--max-concurrent-envs", "1", "--capacity-wait", "0", "--log-level", "info") as served:
        report = run_peer(openreward_python, served.url, "sdk_capacity.py")
        attempts = sum('"POST /create HTTP/1.1" 503' in line for line in served.output)
    assert report["refused"]["status"] == 503 and "capacity" in report["refused"]["detail"]
    assert attempts >= 2   # the SDK retried the 503 (never a 500) before giving up
    assert report["first_still_plays"] is True and report["after_delete"] == "opened"


def test_trl_openreward_spec_trains_grpo_on_envkit_wordle(openreward_python: str, tmp_path: Path) -> None:
    """TRL's OpenRewardSpec(URL, env_name="wordle"): dataset, factory and reward function, then 3 GRPO steps on
    CPU whose every tool result and episode reward equals a local replay of the same calls on Wordle."""
    with ServedProcess("wordle", "--max-concurrent-envs", "32") as served:
        report = run_peer(openreward_python, served.url, "trl_grpo.py", str(tmp_path / "out"), "3")
    assert report["columns"] == ["prompt", "secret_index", "task_index"]   # no secret word among the columns
    assert report["rows"][0] == {"task_index": 0, "secret_index": 1}
    assert report["probe_prompt"].startswith("[GAME] You are Playing Wordle.") and report["probe_tools"] == ["guess"]
    assert "Feedback:" in report["probe_guess"] and report["probe_reward"] == 0.0
    assert report["probe_finished"] is True and report["probe_scored"] == [1.0]
    assert report["steps"] == 3 and report["batches"] == 3 and report["calls_replayed"] > 0
    assert report["mismatches"] == []
    assert report["finite"] and report["logged_rewards"] == pytest.approx(report["expected_rewards"])


@pytest.fixture
def sdk_echo_server(openreward_python: str) -> Iterator[str]:
    """The echo environment of tests/openreward_peer/echo_server.py, served by the openreward SDK's own Server."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([openreward_python, str(PEER / "echo_server.py"), str(port)], env=peer_env(url))
    try:
        deadline = time.monotonic() + 60
        while not is_ors_server(url, timeout=1):
            assert process.poll() is None and time.monotonic() < deadline, "the openreward echo server did not start"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(15)


def test_envkit_train_runs_grpo_steps_against_an_openreward_sdk_server(sdk_echo_server: str, tmp_path: Path) -> None:
    """`envkit train --env-url URL` finds out that URL speaks ORS (no --protocol) and trains 3 steps on its tasks."""
    done = subprocess.run([sys.executable, "-m", "envkit.cli", "train", "--env-url", sdk_echo_server, "--max-steps",
                           "3", "--batch-size", "8", "--num-generations", "4", "--output-dir", str(tmp_path), "-q",
                           "--json"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout)
    assert summary["steps"] == 3 and summary["episodes"] == 24 and summary["lost"] == 0
    assert summary["tool_calls"] > 0 and "echoenv_reward" in summary["end"]
    # Every reward is one the echo environment gives: 1.0 for the target word, else 0.0 (per episode, at most one hit).
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(0.0 <= row["reward"] <= 1.0 for row in rows if "reward" in row)


def test_protocol_is_found_out_and_bad_input_from_envkit_train_is_a_clear_error(sdk_echo_server: str,
                                                                               tmp_path: Path) -> None:
    from envkit.train.runner import _protocol

    assert _protocol(sdk_echo_server, "auto") == "ors"
    done = subprocess.run([sys.executable, "-m", "envkit.cli", "train", "--env-url", sdk_echo_server, "--split",
                           "dev", "--output-dir", str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2 and "echoenv at" in done.stderr and "has no split 'dev'; its splits: train, test" \
        in done.stderr and "Traceback" not in done.stderr


def test_envkit_validate_checks_an_openreward_sdk_server(sdk_echo_server: str) -> None:
    done = subprocess.run([sys.executable, "-m", "envkit.cli", "validate", sdk_echo_server, "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert [check["name"] for check in report["checks"]] == ["ors catalogue", "ors tools", "ors session", "ors call",
                                                             "ors delete", "ors refusals"]
    assert {check["status"] for check in report["checks"]} == {"ok"}
