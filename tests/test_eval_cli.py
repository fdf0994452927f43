"""`envkit eval` and `envkit train --eval-games` as a user runs them: real subprocesses, real servers.

Offline (HF_HUB_OFFLINE=1): models are the tiny one built locally. The OpenAI-compatible server is a
real `transformers serve` process serving a trained tiny model from its folder, on CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from conftest import chat_server_process, subprocess_env
from envkit.testing import ServedProcess, free_port
from envkit.transcripts import FORMAT, read_transcripts


def envkit(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envkit.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=subprocess_env(HF_HUB_OFFLINE="1"))


def rows(done: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    assert done.returncode == 0, done.stderr
    return {row["model"]: row for row in json.loads(done.stdout)["rows"]}


def test_wordle_solver_wins_random_loses_on_invalid_guesses_and_transcripts_read_back(tmp_path: Path) -> None:
    path = tmp_path / "games.jsonl"
    done = envkit("eval", "--env", "wordle", "--policy", "solver", "--policy", "random-letters", "--games", "30",
                  "--json", "--transcripts", str(path))
    found = rows(done)
    solver, random = found["policy:solver"], found["policy:random-letters"]
    assert solver["episodes"] == 30 and solver["successes"] >= 29
    assert solver["metrics"]["won"]["text"] == f"{solver['successes']}/30"
    assert 2 <= solver["metrics"]["guesses"]["value"] <= 4           # guesses per win
    assert solver["metrics"]["invalid_guesses"]["value"] == 0
    assert random["successes"] <= 1 and random["metrics"]["invalid_guesses"]["value"] >= 30
    low, high = random["success_interval_95"]
    assert low == 0 and 0.05 < high < 0.2                               # Wilson: 0/30 is not "certainly 0%"
    assert solver["sessions_lost"] == random["sessions_lost"] == 0
    games = read_transcripts(path)
    assert len(games) == 60 and {game.model for game in games} == {"policy:solver", "policy:random-letters"}
    first = json.loads(path.read_text().splitlines()[0])
    assert first["format"] == FORMAT and first["split"] == "test" and first["task_index"] == 0
    assert first["task"] == {"secret_index": 0}
    won = next(game for game in games if game.model == "policy:solver" and game.metrics["won"])
    assert won.done and won.reward == 1.0 and won.turns[-1].done and won.turns[-1].reward == 1.0
    assert [message["role"] for message in won.messages[:3]] == ["user", "assistant", "tool"]
    assert won.messages[1]["tool_calls"][0]["name"] == "guess"
    assert won.turns[0].result == won.messages[2]["content"]          # what the model read back


def test_wordles_default_random_player_guesses_words_to_the_end_of_the_game() -> None:
    """The baseline `--policy random` is a player of random dictionary words: every guess valid, six guesses a
    game, a few wins by luck; not a stream of non-words that ends each game on its second guess."""
    random = rows(envkit("eval", "--env", "wordle", "--policy", "random", "--games", "30", "--json"))["policy:random"]
    assert random["metrics"]["invalid_guesses"]["value"] == 0
    assert random["mean_steps"] >= 5.5 and random["successes"] <= 3


def test_catch_policies_and_the_text_table() -> None:
    done = envkit("eval", "--env", "catch", "--policy", "solver", "--policy", "random")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "catch" and "caught" in lines[1] and "success (95% CI)" in lines[1]
    solver = next(line for line in lines if line.startswith("policy:solver"))
    random = next(line for line in lines if line.startswith("policy:random"))
    assert "30/30 100%" in solver and " 9.00 " in solver             # every ball caught, 9 moves each
    assert "30/30" not in random


def test_a_running_server_by_url(tmp_path: Path) -> None:
    with ServedProcess("wordle", "--max-concurrent-envs", "8") as served:
        found = rows(envkit("eval", "--env", "wordle", "--env-url", served.url, "--policy", "solver", "--games", "5",
                            "--json"))
        health = httpx.get(served.url + "/health", trust_env=False).json()
    assert found["policy:solver"]["episodes"] == 5 and found["policy:solver"]["successes"] == 5
    assert health["active_sessions"] == 0                              # every game's session was closed


def test_more_games_than_the_server_has_sessions_play_in_turns_to_the_same_table() -> None:
    """10 games against a server of 3 sessions: 3 at a time, progress after each turn, and the table of the same
    10 games played all at once (a server of its own, in the eval's process)."""
    with ServedProcess("wordle", "--max-concurrent-envs", "3") as served:
        done = envkit("eval", "--env", "wordle", "--env-url", served.url, "--policy", "solver", "--policy", "random",
                      "--games", "10", "--json")
    in_turns = rows(done)
    assert "playing 10 games with policy:solver, 3 at a time (wordle has 3 free sessions)" in done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("played")] == \
        ["played 3 of 10 games", "played 6 of 10 games", "played 9 of 10 games", "played 10 of 10 games"] * 2
    at_once = rows(envkit("eval", "--env", "wordle", "--policy", "solver", "--policy", "random", "--games", "10",
                          "--json"))
    for found in (in_turns, at_once):
        for row in found.values():
            row.pop("seconds", None)
    assert in_turns == at_once


def test_one_game_is_one_game() -> None:
    done = envkit("eval", "--env", "wordle", "--policy", "solver", "--games", "1")
    assert done.returncode == 0 and "playing 1 game with policy:solver" in done.stderr, done.stderr


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--env", "nope", "--policy", "solver"], 2, "'nope' is neither a bundled env"),
    (["--env", "wordle", "--split", "validation", "--policy", "solver"], 2, "no split 'validation'; its splits: "
                                                                            "train, test"),
    (["--env", "wordle", "--games", "99", "--policy", "solver"], 2, "--games 99: wordle split 'test' has only 35"),
    (["--env", "wordle", "--env-url", "http://127.0.0.1:9", "--policy", "solver"], 1, "cannot connect to"),
    (["--env", "wordle", "--model", "./no-such-model"], 2, "--model ./no-such-model: no such folder"),
    (["--env", "wordle", "--model", "someone/no-such-model"], 2, "not in the Hugging Face cache while HF_HUB_OFFLINE"),
    (["--env", "wordle", "--policy", "oracle"], 2, "--policy oracle: wordle has no such scripted player; its "
                                                   "players: random, random-letters, solver"),
    (["--env", "wordle"], 2, "say who plays"),
    (["--env", "wordle", "--openai-url", "http://127.0.0.1:9/v1"], 2, "--openai-url needs --model"),
    (["--env", "wordle", "--dataset", "missing.jsonl", "--policy", "solver"], 2, "--dataset missing.jsonl: no such"),
])
def test_bad_input_is_one_line_and_an_exit_code(args: list[str], code: int, message: str) -> None:
    done = envkit("eval", *args)
    assert done.returncode == code, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_an_unreachable_chat_server_is_one_line(tmp_path: Path) -> None:
    done = envkit("eval", "--env", "wordle", "--games", "2", "--openai-url", f"http://127.0.0.1:{free_port()}/v1",
                  "--model", "any")
    assert done.returncode == 1
    assert "cannot reach the chat server" in done.stderr and "Traceback" not in done.stderr


def test_dataset_rows_reach_reset(tmp_path: Path) -> None:
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text('{"word": "crane"}\n{"word": "slate"}\n')
    path = tmp_path / "games.jsonl"
    found = rows(envkit("eval", "--env", "wordle", "--dataset", str(dataset), "--policy", "solver", "--json",
                        "--transcripts", str(path)))
    assert found["policy:solver"]["episodes"] == 2
    games = read_transcripts(path)
    assert [game.task for game in games] == [{"word": "crane"}, {"word": "slate"}]
    assert all(game.split is None and game.task_index is None for game in games)


def test_the_tiny_model_plays_through_tool_calls() -> None:
    found = rows(envkit("eval", "--env", "wordle", "--model", "tiny", "--games", "6", "--json"))
    tiny = found["tiny"]
    assert tiny["episodes"] == 6 and tiny["sessions_lost"] == 0
    assert tiny["mean_steps"] > 0      # the warmed-up tiny model calls the guess tool


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, subprocess.CompletedProcess[str]]]:
    """`envkit train --env wordle` for two steps with --eval-games: a saved model, its transcripts, both rows."""
    output = tmp_path_factory.mktemp("train")
    done = envkit("train", "--env", "wordle", "--max-steps", "2", "--eval-games", "4", "--output-dir", str(output),
                  "--json", "-q", timeout=300)
    yield output, done


def test_train_writes_transcripts_each_step_and_evaluates_before_and_after(
        trained: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    output, done = trained
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert [row["model"] for row in summary["evaluation"]] == ["tiny (before training)", "tiny (after training)"]
    assert all(row["episodes"] == 4 and row["env"] == "wordle" for row in summary["evaluation"])
    steps = read_transcripts(output / "transcripts.jsonl")
    assert sorted({game.extra["step"] for game in steps}) == [1, 2] and len(steps) == 8   # 4 per logging step
    assert all(game.env == "wordle" and "secret_index" in game.task and game.messages[0]["role"] == "user" for game in steps)
    assert any(message.get("tool_calls") for game in steps for message in game.messages)
    assert len(read_transcripts(output / "eval_transcripts.jsonl")) == 8
    # the budget training fitted to Wordle's six guesses (its episode length, plus two)
    assert json.loads((output / "model" / "envkit_play.json").read_text())["max_tool_calling_iterations"] == 8


def test_a_saved_model_plays_as_it_did_in_training(trained: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    output, done = trained
    after = json.loads(done.stdout)["evaluation"][1]
    found = rows(envkit("eval", "--env", "wordle", "--model", str(output / "model"), "--games", "4", "--json"))
    replayed = found[str(output / "model")]
    for key in ("successes", "mean_reward", "mean_steps", "failed_tool_calls", "metrics"):
        assert replayed[key] == after[key], key


@pytest.fixture(scope="module")
def chat_server(trained: tuple[Path, subprocess.CompletedProcess[str]]) -> Iterator[tuple[str, Path]]:
    """`transformers serve` on CPU, serving the trained tiny model from its folder (no network)."""
    model = trained[0] / "model"
    port = free_port()
    command = [str(Path(sys.executable).parent / "transformers"), "serve", str(model), "--host", "127.0.0.1",
               "--port", str(port), "--device", "cpu"]
    with chat_server_process(command, port, trained[0] / "serve.log", env={**os.environ, "HF_HUB_OFFLINE": "1"},
                             start_timeout=90) as root:
        yield root + "/v1", model


def test_a_real_openai_compatible_server_plays_through_its_chat_api(chat_server: tuple[str, Path],
                                                                    tmp_path: Path) -> None:
    url, model = chat_server
    path = tmp_path / "games.jsonl"
    found = rows(envkit("eval", "--env", "wordle", "--openai-url", url, "--model", str(model), "--games", "4",
                        "--json", "--transcripts", str(path)))
    row = found[str(model)]
    assert row["episodes"] == 4 and row["mean_steps"] > 0      # tool calls parsed by the server, run by envkit
    games = read_transcripts(path)
    calls = [message for game in games for message in game.messages if message.get("tool_calls")]
    assert calls and all(call["tool_calls"][0]["name"] == "guess" for call in calls)
    assert any(turn.tool == "guess" for game in games for turn in game.turns)


def test_a_wrong_model_name_on_the_chat_server_is_one_line(chat_server: tuple[str, Path]) -> None:
    url, _ = chat_server
    done = envkit("eval", "--env", "wordle", "--games", "1", "--openai-url", url, "--model", "/no/such/model")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "the chat server at" in done.stderr


def test_policy_evaluation_loads_no_heavy_library() -> None:
    code = ("import sys\nfrom envkit.cli.main import main\n"
            "main(['eval', '--env', 'wordle', '--policy', 'solver', '--games', '2', '-q'])\n"
            "print('heavy:', sorted(name for name in ('torch', 'transformers', 'trl') if name in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=subprocess_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "heavy: []"


def test_eval_help_names_every_scripted_player_the_bundled_envs_and_harbor_offer() -> None:
    from envkit.app.targets import bundled_envs, resolve_target
    from envkit.harbor.environment import TOOL_PLAYERS as HARBOR_PLAYERS
    from envkit.play.policy_player import policy_names

    done = envkit("eval", "--help")
    text = " ".join(done.stdout.split())
    offered = {name for env in bundled_envs() for name in policy_names(resolve_target(env).env_class)}
    for name in sorted(offered | set(HARBOR_PLAYERS)):
        assert f" {name} (" in text, name
