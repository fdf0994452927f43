"""`envkit train` fitted to the environment: the episode length and reward range an environment declares,
the budgets fitted to them, whole scripted warm-up episodes, how abandoned episodes are scored, the warning on
a run with no learning signal, progress output, and output folders that are never silently overwritten.

Real servers on 127.0.0.1 throughout; the one training run builds the tiny model here, offline.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from envkit import Environment, Observation, State, tool
from envkit.environment import Action
from envkit.errors import ConfigurationError
from envkit.app.targets import app_from_environment, resolve_target
from envkit.testing import running_server
from envkit.play.binding import ServedEnvironment, Tally, bind
from envkit.play.tasks import env_rows, task_prompt
from envkit.train.report import RunReport
from envkit.train.rewards import RewardChoice, parse_reward, reward_functions, train_rewards
from envkit.train.runner import run
from envkit.train.settings import TINY_GAME_STEPS, TrainSettings
from envkit.play.tiny import CONTEXT_ONLY, _mini_batches, scripted_conversations


class Tick(Action):
    pass


class Count(Observation):
    left: int = 0


class CountdownEnvironment(Environment[Tick, Count, State]):
    """Count down from four with tick(); the episode ends at zero with reward 1."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUN_INLINE = True
    EPISODE_LENGTH = 4
    REWARD_RANGE = (0.0, 1.0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Count:
        self.left = 4
        return Count(left=4)

    def step(self, action: Tick) -> Count:
        self.left -= 1
        return Count(left=self.left, done=self.left == 0, reward=1.0 if self.left == 0 else 0.0)

    @property
    def state(self) -> State:
        return State()

    @tool
    def tick(self) -> Count:
        """Count one down.

        Returns:
            How many ticks are left.
        """
        return self.step(Tick())


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def catch_url() -> Any:
    with running_server(app_from_environment(resolve_target("catch").env_class, env_name="catch",
                                             max_concurrent_envs=8)) as url:
        yield url


# -- the contract, published ---------------------------------------------------------------------------------


def test_metadata_publishes_version_episode_length_and_reward_range(catch_url: str) -> None:
    metadata = httpx.get(catch_url + "/metadata", trust_env=False).json()
    assert (metadata["version"], metadata["episode_length"], metadata["reward_range"]) == ("0.1.0", 9, [-1.0, 1.0])
    echo = resolve_target("echo").env_class
    with running_server(app_from_environment(echo, env_name="echo")) as url:
        metadata = httpx.get(url + "/metadata", trust_env=False).json()
    assert (metadata["version"], metadata["episode_length"], metadata["reward_range"]) == ("0.1.0", None, None)
    assert metadata["train_rewards"] == []


def test_without_reward_flags_each_environment_trains_on_the_rewards_it_declares() -> None:
    """Wordle declares `played`; echo declares none, so it trains on its own reward; `--reward` replaces both."""
    wordle = type("WordleBound", (ServedEnvironment,), {"env_name": "wordle", "metadata": {"train_rewards": ["played"]},
                                                        "component_names": ("played", "win")})
    echo = type("EchoBound", (ServedEnvironment,), {"env_name": "echo", "metadata": {"train_rewards": []}})
    classes = {"wordle": wordle, "echo": echo}
    assert train_rewards(classes) == [RewardChoice("component", "played", "wordle"), RewardChoice("env", "env", "echo")]
    functions, weights = reward_functions(train_rewards(classes), classes)
    assert [function.__name__ for function in functions] == ["wordle_played", "echo_reward"] and weights == [1.0, 1.0]
    assert resolve_target("wordle").env_class.TRAIN_REWARDS == ("played",)


# -- budgets -------------------------------------------------------------------------------------------------


def test_budgets_fit_the_episode_length_unless_given() -> None:
    tiny = TrainSettings().resolved()
    assert (tiny.max_tool_calling_iterations, tiny.max_completion_length) == (None, None)
    catch = tiny.fitted(9, 200)
    assert (catch.max_tool_calling_iterations, catch.max_completion_length) == (11, 256)
    assert (catch.max_steps, catch.learning_rate) == (TINY_GAME_STEPS, 2e-4)
    assert (tiny.fitted(None).max_steps, tiny.fitted(None).learning_rate) == (30, 1.5e-3)
    assert (tiny.fitted(None).max_tool_calling_iterations, tiny.fitted(None).max_completion_length) == (3, 128)
    given = TrainSettings(max_tool_calling_iterations=5, max_completion_length=300).resolved().fitted(9, 200)
    assert (given.max_tool_calling_iterations, given.max_completion_length) == (5, 300)
    real = TrainSettings(model="Qwen/Qwen3-1.7B").resolved()
    assert (real.fitted(9).max_tool_calling_iterations, real.fitted(9).max_completion_length) == (11, 1408)
    assert (real.fitted(None).max_tool_calling_iterations, real.fitted(None).max_completion_length) == (10, 1024)


# -- the warm-up plays whole episodes ------------------------------------------------------------------------


def test_scripted_warm_up_plays_whole_catch_episodes(catch_url: str) -> None:
    catch = resolve_target("catch").env_class
    bound = bind(catch_url, name="catch")
    rows = env_rows({"catch": task_prompt("catch", bound.metadata)}, 6, 0)
    for share, context_only in ((1.0, False), (0.5, True)):
        conversations = scripted_conversations({"catch": bound}, rows, max_turns=3, players={"catch": catch},
                                               scripted_share=share)
        for messages, listing in conversations:
            calls = [message for message in messages if message.get("tool_calls")]
            replies = [message["content"] for message in messages if message["role"] == "tool"]
            assert len(calls) == 9 and "The game is over." in replies[-1]
            assert [tool["function"]["name"] for tool in listing] == ["move", "stay"]
            if share == 1.0:
                assert "caught, reward +1" in replies[-1]   # the scripted player alone always catches
        marked = [message.get(CONTEXT_ONLY, False) for messages, _ in conversations for message in messages
                  if message.get("tool_calls")]
        assert any(marked) is context_only and not all(marked)


def test_the_warm_up_steps_on_shuffled_mini_batches_cut_to_their_longest() -> None:
    """Each pass over the episodes takes every one once, in a new order, in mini-batches padded only to their own
    longest; with no more episodes than a mini-batch, every step takes them all (as before mini-batches)."""
    import torch

    lengths = [3, 9, 4, 7, 5, 2, 8, 6]
    ids = torch.zeros((len(lengths), 9), dtype=torch.long)
    attention = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, :length] = row + 1
        attention[row, :length] = 1
    batch = {"input_ids": ids, "attention_mask": attention, "labels": ids.clone()}
    batches = _mini_batches(batch, 4, seed=0)
    passes = []
    for _ in range(3):
        rows = []
        for part in (next(batches), next(batches)):
            assert len(part["input_ids"]) == 4 and part["input_ids"].shape == part["labels"].shape
            assert part["input_ids"].shape[1] == int(part["attention_mask"].sum(dim=1).max())
            rows.extend(int(row[0]) - 1 for row in part["input_ids"])
        assert sorted(rows) == list(range(len(lengths)))
        passes.append(rows)
    assert len({tuple(rows) for rows in passes}) > 1
    whole = _mini_batches(batch, 8, seed=0)
    assert next(whole) is batch and next(whole) is batch


# -- abandoned episodes --------------------------------------------------------------------------------------


def test_an_abandoned_episode_scores_the_lowest_reward_the_env_declares(catch_url: str) -> None:
    bound = bind(catch_url, name="catch")
    (env_reward,), _ = reward_functions([parse_reward("env")], {"catch": bound})
    quitter, player = bound(), bound()
    quitter.reset(seed=1)
    quitter.stay()
    player.reset(seed=1, ball_column=2)
    for _ in range(9):
        player.stay()
    assert env_reward(environments=[quitter, player], log_metric=lambda *args: None) == [-1.0, 1.0]
    for instance in (quitter, player):
        instance._close()


def test_a_component_reward_scores_an_abandoned_episode_as_it_stood() -> None:
    """The wordle-grpo recipe's rewards on games the model left (no game finished, as at the tiny model's first
    steps): each the component's standing when the model left (TRL's guide scores a rollout so), not None, which
    TRL logs as NaN for the step; a lost episode stays unscored."""
    choices = [parse_reward(name) for name in ("guide_win", "guide_partial", "guide_invalid")]
    with running_server(app_from_environment(resolve_target("wordle").env_class, env_name="wordle",
                                             max_concurrent_envs=4)) as url:
        bound = bind(url, name="wordle")
        functions, _ = reward_functions(choices, {"wordle": bound})
        silent, guessed, lost = bound(), bound(), bound()
        for instance in (silent, guessed, lost):
            instance.reset(word="crane")
        guessed.guess("[crate]")      # four greens
        guessed.guess("[xyzzy]")      # invalid: warned, the game goes on
        lost.episode.lost = "the session dropped"
        episodes = [silent, guessed, lost]
        scores = [function(environments=episodes, log_metric=lambda *args: None) for function in functions]
        assert not any(instance.episode.done for instance in episodes)
        for instance in episodes:
            instance._close()
    assert scores == [[0.0, 0.0, None], [0.0, pytest.approx(0.4), None], [0.0, pytest.approx(-0.1), None]]


# -- the zero-signal warning ---------------------------------------------------------------------------------


def test_a_run_without_learning_signal_warns_once_with_the_cause(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    settings = TrainSettings(env=["test_train_fit:CountdownEnvironment"], max_steps=4, num_episodes=8,
                             max_tool_calling_iterations=1, output_dir=str(tmp_path / "out"), save_model=False)
    with caplog.at_level(logging.WARNING, logger="envkit.train"):
        summary = run(settings, say=lambda message: None, show_steps=False)
    warnings = [record.getMessage() for record in caplog.records if "no learning signal" in record.getMessage()]
    assert len(warnings) == 1
    assert "in 100% of GRPO groups of steps 1-3 every episode got the same reward" in warnings[0]
    assert "0% of 96 episodes finished by the environment (an episode takes 4 tool calls)" in warnings[0]
    assert "against a budget of 1 turns" in warnings[0]
    assert "the turn budget (1) is shorter than an episode (4 tool calls): raise --max-tool-calling-iterations " \
           "to 6 or more" in warnings[0]
    assert summary.no_signal == warnings[0] and f"warning: {warnings[0]}" in summary.table()


def report_rows(report: RunReport, rows: list[dict[str, float]]) -> None:
    args, control = SimpleNamespace(), SimpleNamespace()
    report.on_train_begin(args, SimpleNamespace(global_step=0), control)
    for step, logs in enumerate(rows, start=1):
        report.on_log(args, SimpleNamespace(global_step=step), control, logs=logs)


def test_a_run_with_signal_does_not_warn(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    report = RunReport(tmp_path, Tally(), 5, [], show=False, budget=(11, 256), episode_length=9)
    with caplog.at_level(logging.WARNING, logger="envkit.train"):
        report_rows(report, [{"reward": 0.1, "frac_reward_zero_std": 0.5}] * 5)
    assert report.zero_signal is None and not caplog.records


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stream, bar", [(io.StringIO(), False), (Terminal(), True)])
def test_a_progress_bar_only_on_a_terminal(tmp_path: Path, stream: io.StringIO, bar: bool) -> None:
    report = RunReport(tmp_path, Tally(), 2, [], stream=stream)
    report_rows(report, [{"reward": 0.5}, {"reward": 0.75}])
    report.close_bar()
    written = stream.getvalue()
    assert "step    1/2  reward    0.500" in written and "step    2/2  reward    0.750" in written
    assert ("\r" in written) is bar and ("envkit train:" in written) is bar


# -- output folders ------------------------------------------------------------------------------------------


def test_a_rerun_never_overwrites_an_earlier_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = TrainSettings().resolved()
    assert settings.claim_output_dir().output_dir == "envkit-train"
    (tmp_path / "envkit-train").mkdir()
    assert settings.claim_output_dir().output_dir == "envkit-train"   # an empty folder holds no run
    (tmp_path / "envkit-train" / "metrics.jsonl").write_text("")
    assert settings.claim_output_dir().output_dir == "envkit-train-2"
    (tmp_path / "envkit-train-2" / "model").mkdir(parents=True)
    assert settings.claim_output_dir().output_dir == "envkit-train-3"
    assert TrainSettings(overwrite=True).resolved().claim_output_dir().output_dir == "envkit-train"
    named = TrainSettings(output_dir="envkit-train-2").resolved()
    with pytest.raises(ConfigurationError, match="holds an earlier run .* pass --overwrite to replace it"):
        named.claim_output_dir()
