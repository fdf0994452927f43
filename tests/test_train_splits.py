"""Training never plays a test task: `envkit train`'s rows and the tiny model's warm-up games, for every bundled
environment that declares splits and for one `envkit new` renders.

A task is compared by what it resolves to, not by its arguments: the game the environment sets up, seen by
playing it out with the package's scripted solver (every observation, and the state at the end without its
episode id). A Wordle row `{"seed": 7}` and the test task `{"secret_index": 3}` are the same task when both
draw the same secret. Each row must resolve to a game of the `train` split. The environments are served on
127.0.0.1 and the rows are read from them as `envkit train` reads them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envkit.app.targets import bundled_envs, resolve_target
from envkit.environment import Environment
from envkit.errors import ConfigurationError
from envkit.play.binding import bind
from envkit.play.embedded import serve_envs
from envkit.play.policy_player import tool_players
from envkit.play.tasks import TEST_SPLIT, TRAIN_SPLIT, task_prompt
from envkit.play.tiny import TinyModelSpec, warmup_rows
from envkit.train.runner import training_data
from envkit.train.settings import TrainSettings

#: Run seeds checked: the default, and one whose seeded rows (seed, seed + 1, ...) would land on the scaffold's
#: test seeds (1000-1029).
SEEDS = (0, 1000)


def split_targets() -> list[str]:
    """Every bundled environment that declares a train and a test split."""
    names = []
    for name in sorted(bundled_envs()):
        splits = resolve_target(name).env_class.splits()
        if TRAIN_SPLIT in splits and TEST_SPLIT in splits:
            names.append(name)
    return names


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`envkit new split_env`, run as a user would."""
    output = tmp_path_factory.mktemp("new")
    done = subprocess.run([sys.executable, "-m", "envkit.cli", "new", "split_env", "--output-dir", str(output)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return str(output / "split_env")


def played_out(env_class: type[Environment], task: dict[str, Any]) -> str:
    """What `task` resolves to: the game the package's solver plays from it, as text."""
    env = env_class()
    observation = env.reset(**task)
    seen = [observation.model_dump()]
    act = tool_players(env_class)["solver"](0)
    for _ in range(4 * (env_class.EPISODE_LENGTH or 10)):
        if observation.done:
            break
        call = act(observation.model_dump(), task)
        if call is None:
            break
        tool, arguments = call
        observation = getattr(env, tool)(**arguments)
        seen.append(observation.model_dump())
    state = env.state.model_dump()
    state.pop("episode_id", None)
    return json.dumps([seen, state], sort_keys=True, default=str)


def training_games(target: str, seed: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """("row" or "warm-up", reset arguments) for every training row and warm-up game of `envkit train --env
    target --seed seed`, with the environment served here."""
    resolved = resolve_target(target)
    settings = TrainSettings(env=[target], seed=seed).resolved()
    with serve_envs([target], 1) as urls:
        classes = {name: bind(url, name=name) for name, url in urls.items()}
        prompts = {name: task_prompt(name, cls.metadata) for name, cls in classes.items()}
        rows = training_data(settings, classes, prompts, say=lambda message: None)
        warm_up = warmup_rows(rows, TinyModelSpec(seed=seed), {resolved.name: resolved.env_class})
    for kind, chosen in (("row", rows), ("warm-up", warm_up)):
        for row in chosen:
            yield kind, {key: value for key, value in row.items() if key not in ("prompt", "environment")}


def check_no_test_game(target: str) -> None:
    env_class = resolve_target(target).env_class
    train = {played_out(env_class, dict(task)) for task in env_class.tasks(TRAIN_SPLIT)}
    test = {played_out(env_class, dict(task)) for task in env_class.tasks(TEST_SPLIT)}
    for seed in SEEDS:
        outside = []
        checked = 0
        for kind, task in training_games(target, seed):
            game = played_out(env_class, task)
            checked += 1
            if game not in train:
                outside.append(f"{kind} {task}" + (" (a test game)" if game in test else ""))
        assert checked, target
        assert not outside, f"{target}, seed {seed}: {len(outside)} of {checked} training games are no train " \
                            f"game: {outside[:5]}"


@pytest.mark.parametrize("target", split_targets())
def test_training_rows_and_warm_up_games_of_a_bundled_env_are_train_games(target: str) -> None:
    check_no_test_game(target)


def test_training_rows_and_warm_up_games_of_a_scaffolded_env_are_train_games(scaffolded: str) -> None:
    check_no_test_game(scaffolded)


def test_the_bundled_envs_with_splits_are_checked() -> None:
    assert split_targets(), "no bundled environment declares a train and a test split"


def test_training_on_the_test_split_needs_saying_so() -> None:
    with pytest.raises(ConfigurationError, match="--train-on-test"):
        TrainSettings(env=["wordle"], split=TEST_SPLIT).resolved()
    assert TrainSettings(env=["wordle"], split=TEST_SPLIT, train_on_test=True).resolved().split == TEST_SPLIT


def test_envkit_train_split_test_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "envkit.cli", "train", "--env", "wordle", "--split", "test"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--train-on-test" in lines[0] and "Traceback" not in done.stderr
