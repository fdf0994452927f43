"""GRPO on captured episodes: TRL's `rollout_func` fed with `TrainingTrace`s instead of TRL's own turn loop.

    from envkit.train.captured import Rollout, captured_rollout_func, harness_reward
    def collect(prompts, trainer) -> list[Rollout]: ...          # one captured episode per prompt
    GRPOTrainer(..., reward_funcs=harness_reward, rollout_func=captured_rollout_func(collect))

Each rollout becomes one GRPO row from its trace (`trace_rows`): the ids and masks as captured. A trace
that splits into several sequences (a rewritten history, a side call) trains on the one holding the most
trained tokens: TRL's `GRPOTrainer` scores exactly one row per rollout of a group, so the others are
counted (`rollout/samples_per_rollout` is the sequences a rollout made) and left out. A rollout with no
trained token, or scored None, stays in its group as an unscorable row (every reward None: TRL leaves it
out of the group's baseline and gives it no advantage), as TRL's harness worker drops it.

The rollout's reward reaches TRL through the `harness_reward` reward function (TRL's harness worker's
name for it), so the step logs `rewards/harness_reward/mean`; the batch also logs TRL's tool metrics
(`tools/call_frequency`, `tools/failure_frequency`, `tools/loop_exhausted_frac` for agents stopped at
their time limit) and its harness worker's rollout shape (`rollout/turns_mean`, `rollout/samples_per_rollout`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .trace_rows import TraceRow, trace_rows

__all__ = ["Rollout", "captured_rollout_func", "harness_reward", "grpo_fields", "REWARD_FIELD"]

#: The extra rollout field holding each rollout's reward, and the reward function that reads it.
REWARD_FIELD = "harness_reward"


@dataclass
class Rollout:
    """One captured episode: its TrainingTrace (a JSON-able dict), reward (None: unscorable) and tool counts."""

    trace: dict[str, Any]
    reward: float | None
    tool_calls: int = 0
    tool_failures: int = 0
    timed_out: bool = False


def harness_reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """The reward each captured rollout earned (None: the rollout leaves its group)."""
    return list(kwargs[REWARD_FIELD])


def captured_rollout_func(collect: Callable[[list[Any], Any], list[Rollout]]) -> Callable[[list[Any], Any],
                                                                                          dict[str, Any]]:
    """TRL's `rollout_func` over `collect(prompts, trainer)`, which returns one captured `Rollout` per prompt."""

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        rollouts = collect(prompts, trainer)
        if len(rollouts) != len(prompts):
            raise RuntimeError(f"the rollouts returned {len(rollouts)} episodes for {len(prompts)} prompts")
        mode = "train" if trainer.model.training else "eval"
        fields = grpo_fields(rollouts, trainer.processing_class)
        _log_rollout_metrics(trainer, mode, rollouts, fields.pop("_sequences"))
        return fields

    return rollout_func


def grpo_fields(rollouts: list[Rollout], tokenizer: Any) -> dict[str, Any]:
    """TRL's rollout fields for `rollouts`, one row each, and `harness_reward` (plus `_sequences`, per rollout)."""
    chosen: list[TraceRow] = []
    rewards: list[float | None] = []
    sequences: list[int] = []
    for rollout in rollouts:
        rows = trace_rows(rollout.trace)
        sequences.append(len(rows))
        if rows:
            chosen.append(max(rows, key=lambda row: row.trained_tokens))
            rewards.append(rollout.reward)
        else:
            chosen.append(_unscorable_row(tokenizer))
            rewards.append(None)
    return {
        "prompt_ids": [row.prompt_ids for row in chosen],
        "completion_ids": [row.completion_ids for row in chosen],
        "logprobs": [row.logprobs for row in chosen],
        "env_mask": [row.env_mask for row in chosen],
        REWARD_FIELD: rewards,
        "_sequences": sequences,
    }


def _unscorable_row(tokenizer: Any) -> TraceRow:
    """The stand-in row of a rollout with nothing to train: one context token each side, no trained token."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return TraceRow([pad], [tokenizer.eos_token_id], [0.0], [0])


def _log_rollout_metrics(trainer: Any, mode: str, rollouts: list[Rollout], sequences: list[int]) -> None:
    from .rollouts import log_tool_metrics

    log_tool_metrics(trainer, mode, [item.tool_calls for item in rollouts], [item.tool_failures for item in rollouts])
    count = max(1, len(rollouts))
    metrics = trainer._metrics[mode]
    metrics["tools/loop_exhausted_frac"].append(sum(item.timed_out for item in rollouts) / count)
    metrics["rollout/turns_mean"].append(sum(len(item.trace.get("turns", ())) for item in rollouts) / count)
    metrics["rollout/samples_per_rollout"].append(sum(sequences) / count)
