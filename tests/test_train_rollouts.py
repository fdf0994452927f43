"""`envkit.train.rollouts.GRPOTrainer` plays a batch's episodes together, and they are TRL's episodes token for token.

Offline, on CPU: the tiny model is built here, the environments are served on 127.0.0.1 in this process. TRL's
own `GRPOTrainer` (1.16, its tool-calling loop) and envkit's train the same model copy with the same seed for two
steps, sampling at temperature 1; everything the reward functions and the logs see must be equal. The overlap
itself is guarded without timing: an environment whose `reset` (or tool) waits at a barrier until every rollout
of the batch is inside it fails when the calls come one after another.
"""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any

import pytest

from envkit import Action, Environment, Observation, State, tool
from envkit.play.loop import Conversation, Game, start, take_turns
from envkit.app.targets import app_from_environment, resolve_target
from envkit.testing import running_server
from envkit.play.binding import ServedEnvironment, bind
from envkit.play.tasks import env_rows, task_prompt

STEPS, GENERATIONS, BATCH = 2, 4, 8
CHAT = {"enable_thinking": False}
#: Log entries that measure time, not the episodes.
TIMINGS = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second", "epoch"}


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


def _train(trainer_class: Any, model: Any, tokenizer: Any, cls: type[ServedEnvironment], rows: list[dict[str, Any]],
           output: Path, **config: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """Train a copy of `model` for STEPS steps; returns what the reward function saw each step, the logs, and the
    trainer."""
    from datasets import Dataset
    from trl import GRPOConfig

    seen: list[dict[str, Any]] = []

    def record(prompts: list[Any], completions: list[Any], completion_ids: list[list[int]], environments: list[Any],
               **kwargs: Any) -> list[float]:
        episodes = [environment.episode for environment in environments]
        seen.append({"prompts": copy.deepcopy(prompts), "completions": copy.deepcopy(completions),
                     "completion_ids": [list(ids) for ids in completion_ids],
                     "episodes": [(e.row, e.reward, e.done, e.tool_calls, e.tool_errors, e.texts,
                                   [t.to_json() for t in e.turns])
                                  for e in episodes]})
        return [episode.reward for episode in episodes]

    settings = {"max_completion_length": 96, "max_tool_calling_iterations": 4, "num_generations": GENERATIONS,
                "per_device_train_batch_size": BATCH, "chat_template_kwargs": CHAT, "use_cpu": True, "report_to": [],
                "logging_steps": 1, "save_strategy": "no", "beta": 0.0, "max_steps": STEPS, "seed": 0,
                "learning_rate": 1e-3, **config}
    trainer = trainer_class(model=copy.deepcopy(model), reward_funcs=record, args=GRPOConfig(output_dir=str(output),
                                                                                             **settings),
                            train_dataset=Dataset.from_list(rows), processing_class=copy.deepcopy(tokenizer),
                            environment_factory=type(cls.__name__, (cls,), {}))
    trainer.train()
    cls._close_all()
    logs = [{key: value for key, value in entry.items() if key not in TIMINGS} for entry in trainer.state.log_history]
    return seen, logs, trainer


@pytest.mark.parametrize("env", ["wordle", "catch"])
def test_rollouts_are_trls_token_for_token(env: str, tmp_path: Path) -> None:
    """Same completion ids, prompts and messages, episodes (rows, rewards, turns, texts) and logged metrics as TRL's own loop,
    over two seeded steps (the second after a weight update). Fails when any part of the episode differs: a turn
    budget, a dropped overlong tool result, a tool error's text, the sampling order of a batch."""
    import torch
    from trl import GRPOTrainer as TRLTrainer

    from envkit.train.rollouts import GRPOTrainer
    from envkit.play.tiny import TinyModelSpec, build_tiny_model

    torch.set_num_threads(1)
    target = resolve_target(env)
    with running_server(app_from_environment(target.env_class, env_name=env, max_concurrent_envs=2 * BATCH)) as url:
        cls = bind(url, name=env)
        rows = env_rows({env: task_prompt(env, cls.metadata)}, 16, 0)
        model, tokenizer, _ = build_tiny_model({env: cls}, rows, TinyModelSpec())
        theirs, their_logs, _ = _train(TRLTrainer, model, tokenizer, cls, rows, tmp_path / "trl")
        ours, our_logs, trainer = _train(GRPOTrainer, model, tokenizer, cls, rows, tmp_path / "envkit")

    assert trainer.rollout_func is not None, "the rollouts stepped aside on this TRL"
    assert len(ours) == len(theirs) == STEPS
    for step, (mine, trls) in enumerate(zip(ours, theirs, strict=True)):
        assert mine["completion_ids"] == trls["completion_ids"], f"step {step}"
        assert mine["completions"] == trls["completions"], f"step {step}"
        assert mine["prompts"] == trls["prompts"], f"step {step}"
        assert mine["episodes"] == trls["episodes"], f"step {step}"
    assert our_logs == their_logs
    assert any(message.get("tool_calls") for step in ours for completion in step["completions"]
               for message in completion)
    assert any(entry.get("tools/call_frequency") for entry in our_logs)


class GateAction(Action):
    note: str = ""


class GateObservation(Observation):
    notes: list[str] = []


class GateEnvironment(Environment[GateAction, GateObservation, State]):
    """`reset` and the `note` tool wait at a class-wide barrier of `parties` callers (30 s at most, then fail):
    they only pass when that many calls are in flight at once. Each episode records its notes in order."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    reset_gate: threading.Barrier | None = None
    call_gate: threading.Barrier | None = None

    def __init__(self) -> None:
        self.notes: list[str] = []

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GateObservation:
        if type(self).reset_gate is not None:
            type(self).reset_gate.wait(timeout=30)
        self.notes = []
        return GateObservation(notes=[])

    def step(self, action: GateAction) -> GateObservation:
        return self.note(action.note)

    @property
    def state(self) -> State:
        return State()

    @tool
    def note(self, note: str) -> GateObservation:
        """Write a note.

        Args:
            note: the note.
        """
        if type(self).call_gate is not None:
            type(self).call_gate.wait(timeout=30)
        self.notes.append(note)
        return GateObservation(notes=list(self.notes), reward=0.0)


class NotingPlayer:
    """Calls `note` twice a turn in every conversation, for three turns."""

    label = "notes"

    def respond(self, conversations: list[Conversation]) -> list[dict[str, Any] | None]:
        answers = []
        for conversation in conversations:
            turn = conversation.state["turn"] = conversation.state.get("turn", 0) + 1
            calls = [{"type": "function", "function": {"name": "note", "arguments": {"note": f"{turn}{part}"}}}
                     for part in "ab"]
            answers.append({"role": "assistant", "content": "", "tool_calls": calls} if turn <= 3 else None)
        return answers


def test_a_batch_resets_and_calls_tools_together(tmp_path: Path) -> None:
    """All rollouts' resets are in flight at once, and each turn's first (then second) tool calls of all rollouts;
    an episode's own calls keep their order. Calls made one rollout after another never fill the barrier, and the
    first one fails after its 30 s wait."""
    rollouts = 6
    app = app_from_environment(GateEnvironment, env_name="gate", max_concurrent_envs=rollouts)
    try:
        with running_server(app) as url:
            cls = bind(url, name="gate")   # its probe episode resets alone: the gates close after it
            GateEnvironment.reset_gate = threading.Barrier(rollouts)
            GateEnvironment.call_gate = threading.Barrier(rollouts)
            environments = [cls() for _ in range(rollouts)]
            games = [Game("gate", {"seed": index}, [{"role": "user", "content": "go "}]) for index in range(rollouts)]
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=rollouts) as pool:
                conversations = start(games, environments, pool)
                take_turns(NotingPlayer(), conversations, pool, max_tool_calling_iterations=5)
            cls._close_all()
    finally:
        GateEnvironment.reset_gate = GateEnvironment.call_gate = None
    for conversation in conversations:
        assert [turn.arguments["note"] for turn in conversation.episode.turns] == ["1a", "1b", "2a", "2b", "3a", "3b"]
        assert conversation.episode.tool_errors == 0 and conversation.failed_calls == 0
        assert conversation.tool_calls == 6


def test_the_trainer_resets_a_batch_together(tmp_path: Path) -> None:
    """Through the trainer: one GRPO step of a batch whose resets only pass when all of them are in flight. An
    environment class not bound by envkit is left to TRL's own loop."""
    import torch

    from envkit.train.rollouts import GRPOTrainer
    from envkit.play.tiny import TinyModelSpec, build_tiny_model

    torch.set_num_threads(1)
    app = app_from_environment(GateEnvironment, env_name="gate", max_concurrent_envs=2 * BATCH)
    with running_server(app) as url:
        cls = bind(url, name="gate")
        rows = env_rows({"gate": "Write notes. "}, 8, 0)
        model, tokenizer, _ = build_tiny_model({"gate": cls}, rows, TinyModelSpec(episodes=4))
        GateEnvironment.reset_gate = threading.Barrier(BATCH)
        try:
            seen, _, trainer = _train(GRPOTrainer, model, tokenizer, cls, rows, tmp_path, max_steps=1)
        finally:
            GateEnvironment.reset_gate = None
    assert trainer.rollout_func is not None and trainer.tools == []
    assert all(episode[0].get("seed") is not None for episode in seen[0]["episodes"])

    from datasets import Dataset
    from trl import GRPOConfig

    class Plain:   # not bound by envkit: TRL's own loop plays it
        def reset(self, **row: Any) -> str:
            return "ready"

        def note(self, note: str) -> str:
            """Write a note.

            Args:
                note: the note.
            """
            return note

    plain = GRPOTrainer(model=model, reward_funcs=lambda completions, **_: [0.0] * len(completions),
                        args=GRPOConfig(output_dir=str(tmp_path / "plain"), use_cpu=True, report_to=[],
                                        num_generations=GENERATIONS, per_device_train_batch_size=BATCH),
                        train_dataset=Dataset.from_list(rows), processing_class=tokenizer, environment_factory=Plain)
    assert plain.rollout_func is None and [tool.__name__ for tool in plain.tools] == ["note"]


def test_this_trl_has_every_part_the_rollouts_use(tmp_path: Path) -> None:
    """Where TRL renames or reshapes a member the rollouts use, this fails (the trainer would quietly step aside)."""
    from envkit.train.rollouts import trl_parts_missing

    assert trl_parts_missing() == []
