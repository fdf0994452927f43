"""A slow environment under TRL's tool-calling loop and under envkit's rollouts: time per GRPO step, time waiting.

    nice -n 10 python benchmarks/rollout_overlap.py            # about 5 minutes on 2 cores
    nice -n 10 python benchmarks/rollout_overlap.py --quick    # 16 rollouts only

An environment whose `reset` sleeps 0 or 1 s and whose one tool sleeps 0, 10 or 100 ms (the reset sweep with an
instant tool, the tool sweep with an instant reset; the sleeps are dataset columns, so they reach `reset`), served
by `envkit serve` in a process of its own (asyncio sleeps: it serves every session at once, as a sandbox service
would); 16 and 64 rollouts a step (GRPO groups of 16); the tiny model on CPU (`--model tiny`, built here,
offline). Each case trains the same model copy with the same seed for 2 steps under TRL 1.16's `GRPOTrainer` (its
own loop: one rollout's calls after another's) and under `envkit.train.rollouts.GRPOTrainer` (a batch's calls at
once), one after the other.

Per step: wall time (TRL's `step_time`), the time the trainer waited for the environment (the tally's
`env_seconds`: every call's time in TRL's loop, where they run one at a time; the batch's wall-clock waits in
envkit's) and its share of the step; of that wait, the resets' part (`reset_seconds`), and the tool calls' part
per tool-calling turn (the batch plays in lockstep, so a step has as many turns as its longest episode). A turn
in which some rollout sends two calls cannot take less than two calls' time (a rollout's calls run in order):
`floor` is that least possible wait per turn, in calls. Writes `benchmarks/results/rollout_overlap.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from envkit import Action, Environment, Observation, State, tool
from envkit.testing import ServedProcess
from envkit.play.binding import Tally, bind
from envkit.play.tasks import env_rows, task_prompt

STEPS, GENERATIONS = 2, 16
#: (reset seconds, tool seconds)
CASES = [(0.0, 0.0), (0.0, 0.01), (0.0, 0.1), (1.0, 0.0)]
RESULTS = Path(__file__).parent / "results" / "rollout_overlap.json"


class SleepyAction(Action):
    message: str = ""


class SleepyObservation(Observation):
    echoed: str = ""


class SleepyEnvironment(Environment[SleepyAction, SleepyObservation, State]):
    """Echo, slowly: `reset(reset_s=..., step_s=...)` sleeps `reset_s`, and each `echo` then sleeps `step_s`."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUN_INLINE = True   # asyncio sleeps: nothing blocks the server's loop

    def __init__(self) -> None:
        self.step_s = 0.0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> SleepyObservation:
        raise NotImplementedError("served through reset_async")

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None, reset_s: float = 0.0,
                          step_s: float = 0.0, **kwargs: Any) -> SleepyObservation:
        await asyncio.sleep(reset_s)
        self.step_s = step_s
        return SleepyObservation(echoed="ready", reward=0.0)

    def step(self, action: SleepyAction) -> SleepyObservation:
        raise NotImplementedError("a tool environment")

    @property
    def state(self) -> State:
        return State()

    @tool
    async def echo(self, message: str) -> SleepyObservation:
        """Echo a message back; a longer one earns more.

        Args:
            message: the text to echo.
        """
        await asyncio.sleep(self.step_s)
        return SleepyObservation(echoed=message, reward=0.1 * len(message))


def calls_per_turn(completion: list[dict[str, Any]]) -> list[int]:
    """The number of tool calls run in each turn of an episode (tool messages after an assistant message)."""
    turns: list[int] = []
    for message, before in zip(completion, [{}, *completion], strict=False):
        if message.get("role") == "tool":
            if before.get("role") == "assistant":
                turns.append(0)
            turns[-1] += 1
    return turns


def measure(trainer_class: Any, model: Any, tokenizer: Any, cls: Any, rows: list[dict[str, Any]], rollouts: int,
            output: Path) -> dict[str, float]:
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig

    turns: list[int] = []
    floors: list[int] = []

    def reward(completions: list[Any], environments: list[Any], **_: Any) -> list[float]:
        played = [calls_per_turn(completion) for completion in completions]
        longest = max(len(calls) for calls in played)
        turns.append(longest)
        floors.append(sum(max(calls[turn] for calls in played if turn < len(calls)) for turn in range(longest)))
        return [environment.episode.reward for environment in environments]

    tally = Tally()
    config = GRPOConfig(output_dir=str(output), max_completion_length=96, max_tool_calling_iterations=3,
                        num_generations=GENERATIONS, per_device_train_batch_size=rollouts,
                        chat_template_kwargs={"enable_thinking": False}, use_cpu=True, report_to=[], logging_steps=1,
                        save_strategy="no", beta=0.0, max_steps=STEPS, seed=0, learning_rate=1e-3,
                        disable_tqdm=True)
    trainer = trainer_class(model=copy.deepcopy(model), reward_funcs=reward, args=config,
                            train_dataset=Dataset.from_list(rows), processing_class=copy.deepcopy(tokenizer),
                            environment_factory=type(cls.__name__, (cls,), {"tally": tally}))
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    cls._close_all()
    seconds = statistics.mean(entry["step_time"] for entry in trainer.state.log_history if "step_time" in entry)
    return {"seconds": seconds, "env_s": tally.env_seconds / STEPS, "reset_wait_s": tally.reset_seconds / STEPS,
            "turns": statistics.mean(turns),
            "floor": statistics.mean(floors) / max(statistics.mean(turns), 1), "calls": tally.tool_calls / STEPS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 rollouts only")
    options = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import logging

    import torch
    from trl import GRPOTrainer as TRLTrainer

    from envkit.train.rollouts import GRPOTrainer
    from envkit.play.tiny import TinyModelSpec, build_tiny_model

    logging.getLogger("envkit.server").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    sizes = (16,) if options.quick else (16, 64)
    rows_out = []
    served = ServedProcess("rollout_overlap:SleepyEnvironment", "--max-concurrent-envs", "256",
                           env={"PYTHONPATH": str(Path(__file__).parent)})
    with served, tempfile.TemporaryDirectory() as scratch:
        cls = bind(served.url, name="sleepy")
        seeds = env_rows({"sleepy": task_prompt("sleepy", cls.metadata)}, 64, 0)
        model, tokenizer, _ = build_tiny_model({"sleepy": cls}, seeds, TinyModelSpec())
        for reset_s, step_s in CASES:
            rows = [{**row, "reset_s": reset_s, "step_s": step_s} for row in seeds]
            for rollouts in sizes:
                row: dict[str, Any] = {"reset_s": reset_s, "step_s": step_s, "rollouts": rollouts}
                for label, trainer_class in (("trl", TRLTrainer), ("envkit", GRPOTrainer)):
                    figures = measure(trainer_class, model, tokenizer, cls, rows, rollouts, Path(scratch) / label)
                    row[label] = figures
                    print(json.dumps({"reset_s": reset_s, "step_s": step_s, "rollouts": rollouts, "loop": label,
                                      **{key: round(value, 3) for key, value in figures.items()}}), flush=True)
                rows_out.append(row)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(rows_out, indent=2) + "\n")
    print(table(rows_out))


def table(rows: list[dict[str, Any]]) -> str:
    """The results as a Markdown table."""
    lines = ["| reset | tool call | rollouts | loop | s/step | env wait s/step | share | turns (floor) "
             "| wait per turn, or per step's resets |",
             "| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        for label in ("trl", "envkit"):
            figures = row[label]
            turn = (figures["env_s"] - figures["reset_wait_s"]) / max(figures["turns"], 1)
            if row["reset_s"]:
                resets = figures["reset_wait_s"]
                per = f"resets {resets:.2f} s = {resets / row['reset_s']:.2f}× one reset"
            elif row["step_s"]:
                per = f"a turn {turn * 1000:.0f} ms = {turn / row['step_s']:.2f}× one call"
            else:
                per = f"resets {figures['reset_wait_s'] * 1000:.0f} ms, a turn {turn * 1000:.1f} ms"
            lines.append(f"| {row['reset_s']:g} s | {row['step_s'] * 1000:g} ms | {row['rollouts']} | "
                         f"{'TRL 1.16' if label == 'trl' else 'envkit'} | {figures['seconds']:.2f} | "
                         f"{figures['env_s']:.2f} | {figures['env_s'] / figures['seconds']:.0%} | "
                         f"{figures['turns']:.1f} ({figures['floor']:.2f}) | {per} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
