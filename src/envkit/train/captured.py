"""GRPO on captured episodes: TRL's `rollout_func` fed with `TrainingTrace`s instead of TRL's own turn loop.

    from envkit.train.captured import CapturedGRPOTrainer, Rollout, captured_rollout_func, harness_reward
    def collect(prompts, trainer) -> list[Rollout]: ...          # one captured episode per prompt
    Rollout(trace, reward, outcome_of(trace, reward, timed_out))  # what a rollout holds
    CapturedGRPOTrainer(..., reward_funcs=harness_reward, rollout_func=captured_rollout_func(collect))

Each rollout's trace makes one GRPO row per root (`trace_rows`): the ids and masks as captured. TRL's
`GRPOTrainer` scores exactly one row per rollout of a group, so the root holding the most trained tokens is
the rollout's row there; `CapturedGRPOTrainer` (TRL's trainer with this one change) then adds the rollout's
other roots to the batch as rows of their own with the rollout's advantage, as TRL's harness worker trains
every sequence of a rollout (`rollout/samples_per_rollout` counts them). With TRL's own `GRPOTrainer` the
other roots are counted and left out. A rollout with no trained token, or scored None, stays in its group as
an unscorable row (every reward None: TRL leaves it out of the group's baseline and gives it no advantage), as
TRL's harness worker drops it.

The rollout's reward reaches TRL through the `harness_reward` reward function (TRL's harness worker's
name for it), so the step logs `rewards/harness_reward/mean`; the batch also logs TRL's tool metrics
(`tools/call_frequency`, `tools/failure_frequency`, `tools/loop_exhausted_frac` for agents stopped at
their time limit) and its harness worker's rollout shape (`rollout/turns_mean`, `rollout/samples_per_rollout`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trl import GRPOTrainer as TRLGRPOTrainer

from .trace_rows import TraceRow, trace_rows

logger = logging.getLogger("envkit.train")

__all__ = ["Rollout", "AgentOutcome", "outcome_of", "CapturedGRPOTrainer", "captured_rollout_func", "harness_reward",
           "grpo_fields", "REWARD_FIELD"]

#: The extra rollout field holding each rollout's reward, and the reward function that reads it.
REWARD_FIELD = "harness_reward"
#: Each rollout's rows beyond its first (its other roots), handed to the trainer as `trainer.other_roots`.
OTHER_ROOTS = "envkit_other_roots"


#: Words that mark a tool result as a failure when counting the agent's failed tool calls (as TRL's harness counts).
FAILURE_WORDS = ("error", "failed", "traceback", "exception")


@dataclass
class AgentOutcome:
    """How an episode went, from its trace: the fields of TRL 1.16's `HarnessRolloutOutcome` (what
    `--rollout-reward module:fn` receives)."""

    env_reward: float | None
    completion: list[dict[str, Any]]
    trace: list[dict[str, Any]]
    tool_call_count: int
    tool_failure_count: int
    tool_calls_by_name: dict[str, int]
    timed_out: bool


def outcome_of(trace: Mapping[str, Any], env_reward: float | None, timed_out: bool) -> AgentOutcome:
    """The outcome of an episode from its trace: the last request's messages and reply, and the tool calls the
    model made (by name) and those whose results read as failures."""
    turns = list(trace.get("turns", ()))
    entries = [{**{key: value for key, value in turn.items() if key != "node_id"},
                "metadata": {**turn.get("metadata", {}), "node_id": turn.get("node_id")}} for turn in turns]
    by_name: dict[str, int] = {}
    for turn in turns:
        for call in _reply(turn).get("tool_calls") or ():
            name = (call.get("function") or call).get("name")
            if name:
                by_name[name] = by_name.get(name, 0) + 1
    messages = list((turns[-1].get("request") or {}).get("messages") or []) if turns else []
    failures = sum(1 for message in messages if message.get("role") == "tool"
                   and any(word in str(message.get("content") or "").lower() for word in FAILURE_WORDS))
    completion = messages + ([{"role": "assistant", "content": _reply(turns[-1]).get("content") or ""}]
                             if turns else [])
    return AgentOutcome(env_reward, completion, entries, sum(by_name.values()), failures, by_name, timed_out)


def _reply(turn: Mapping[str, Any]) -> dict[str, Any]:
    choices = (turn.get("response") or {}).get("choices") or [{}]
    return choices[0].get("message") or {}


@dataclass
class Rollout:
    """One captured episode: its TrainingTrace (a JSON-able dict), its reward (None: unscorable), and how it went
    (`outcome`; None for an episode lost before it ran)."""

    trace: dict[str, Any]
    reward: float | None
    outcome: AgentOutcome | None = None

    @property
    def tool_calls(self) -> int:
        return self.outcome.tool_call_count if self.outcome else 0

    @property
    def tool_failures(self) -> int:
        return self.outcome.tool_failure_count if self.outcome else 0

    @property
    def timed_out(self) -> bool:
        return bool(self.outcome and self.outcome.timed_out)


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
        _log_rollout_metrics(trainer, mode, rollouts, [1 + len(rows) for rows in fields[OTHER_ROOTS]])
        trainer.other_roots = fields.pop(OTHER_ROOTS)
        return fields

    return rollout_func


def grpo_fields(rollouts: list[Rollout], tokenizer: Any) -> dict[str, Any]:
    """TRL's rollout fields for `rollouts`, one row each (each rollout's root with the most trained tokens), and
    `harness_reward`; `OTHER_ROOTS` holds each rollout's other rows."""
    chosen: list[TraceRow] = []
    rewards: list[float | None] = []
    others: list[list[TraceRow]] = []
    for rollout in rollouts:
        rows = sorted(trace_rows(rollout.trace), key=lambda row: -row.trained_tokens)
        chosen.append(rows[0] if rows else _unscorable_row(tokenizer))
        rewards.append(rollout.reward if rows else None)
        others.append(rows[1:])
    return {
        "prompt_ids": [row.prompt_ids for row in chosen],
        "completion_ids": [row.completion_ids for row in chosen],
        "logprobs": [row.logprobs for row in chosen],
        "env_mask": [row.env_mask for row in chosen],
        REWARD_FIELD: rewards,
        OTHER_ROOTS: others,
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


class CapturedGRPOTrainer(TRLGRPOTrainer):
    """TRL's `GRPOTrainer` that also trains every other root of a captured rollout, as a row of its own carrying
    the rollout's advantage (use it with `captured_rollout_func`). A batch grows by those rows, and by context-only
    filler rows so that it still splits into `steps_per_generation` equal parts."""

    other_roots: list[list[TraceRow]] = []

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self.other_roots = []
        batch = super()._generate_and_score_completions(inputs)
        extra = [(index, row) for index, rows in enumerate(self.other_roots) for row in rows]
        if not extra:
            return batch
        return _with_rows(self, batch, extra)


#: The batch entries `_with_rows` extends; a batch holding any other tensor (images) keeps its rows as they are.
_ROW_KEYS = {"prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "num_items_in_batch",
             "old_per_token_logps", "sampling_per_token_logps", "ref_per_token_logps", "tool_mask",
             "importance_sampling_ratio"}


def _with_rows(trainer: Any, batch: dict[str, Any], extra: list[tuple[int, TraceRow]]) -> dict[str, Any]:
    """`batch` (TRL's padded generation batch) with one row per `(rollout index, row)` of `extra`, each with that
    rollout's advantage, plus filler rows (nothing trained) up to a multiple of `steps_per_generation`."""
    import torch

    if set(batch) - _ROW_KEYS:
        logger.warning("envkit: a batch with %s keeps one row per rollout; other roots are left out",
                       ", ".join(sorted(set(batch) - _ROW_KEYS)))
        return batch
    tokenizer = trainer.processing_class
    filler = _unscorable_row(tokenizer)
    parts = max(1, int(trainer.args.steps_per_generation))
    rows = [row for _, row in extra] + [filler] * (-(len(batch["prompt_ids"]) + len(extra)) % parts)
    advantages = batch["advantages"][[index for index, _ in extra]]
    advantages = torch.cat([advantages, torch.zeros(len(rows) - len(extra), dtype=advantages.dtype,
                                                    device=advantages.device)])
    pad = tokenizer.pad_token_id
    device = batch["prompt_ids"].device
    prompt_width = max(batch["prompt_ids"].shape[1], *(len(row.prompt_ids) for row in rows))
    completion_width = max(batch["completion_ids"].shape[1], *(len(row.completion_ids) for row in rows))

    def table(values: list[list[Any]], fill: Any, width: int, left: bool, dtype: Any) -> Any:
        out = torch.full((len(values), width), fill, dtype=dtype, device=device)
        for line, items in enumerate(values):
            if items:
                if left:
                    out[line, width - len(items):] = torch.tensor(items, dtype=dtype)
                else:
                    out[line, :len(items)] = torch.tensor(items, dtype=dtype)
        return out

    def widened(tensor: Any, width: int, fill: Any, left: bool) -> Any:
        missing = width - tensor.shape[1]
        return torch.nn.functional.pad(tensor, (missing, 0) if left else (0, missing), value=fill)

    grown = dict(batch)
    grown["prompt_ids"] = torch.cat([widened(batch["prompt_ids"], prompt_width, pad, True),
                                     table([r.prompt_ids for r in rows], pad, prompt_width, True, torch.long)])
    grown["prompt_mask"] = torch.cat([widened(batch["prompt_mask"], prompt_width, 0, True),
                                      table([[1] * len(r.prompt_ids) for r in rows], 0, prompt_width, True,
                                            batch["prompt_mask"].dtype)])
    grown["completion_ids"] = torch.cat([widened(batch["completion_ids"], completion_width, pad, False),
                                         table([r.completion_ids for r in rows], pad, completion_width, False,
                                               torch.long)])
    grown["completion_mask"] = torch.cat([widened(batch["completion_mask"], completion_width, 0, False),
                                          table([[1] * len(r.completion_ids) for r in rows], 0, completion_width,
                                                False, batch["completion_mask"].dtype)])
    tool_mask = batch.get("tool_mask")
    if tool_mask is None:
        tool_mask = batch["completion_mask"].clone()
    grown["tool_mask"] = torch.cat([widened(tool_mask, completion_width, 1, False),
                                    table([r.env_mask for r in rows], 1, completion_width, False, tool_mask.dtype)])
    grown["advantages"] = torch.cat([batch["advantages"], advantages])
    if batch.get("sampling_per_token_logps") is not None:
        logps = batch["sampling_per_token_logps"]
        grown["sampling_per_token_logps"] = torch.cat([widened(logps, completion_width, 0.0, False),
                                                       table([r.logprobs for r in rows], 0.0, completion_width,
                                                             False, logps.dtype)])
    new = slice(len(batch["prompt_ids"]), None)
    for key, model in (("old_per_token_logps", trainer.model), ("ref_per_token_logps", trainer.ref_model)):
        if batch.get(key) is not None:
            grown[key] = torch.cat([widened(batch[key], completion_width, 0.0, False),
                                    _logps(trainer, model, grown, new)])
    ratio = batch.get("importance_sampling_ratio")
    if ratio is not None:   # no correction on the added rows
        wide = widened(ratio, completion_width, 1.0, False) if ratio.shape[1] > 1 else ratio
        grown["importance_sampling_ratio"] = torch.cat([wide, torch.ones((len(rows), wide.shape[1]),
                                                                         dtype=wide.dtype, device=device)])
    added = (grown["completion_mask"][new] * grown["tool_mask"][new]).sum()
    grown["num_items_in_batch"] = batch["num_items_in_batch"] + trainer.accelerator.gather(added).sum()
    return grown


def _logps(trainer: Any, model: Any, batch: dict[str, Any], rows: slice) -> Any:
    """Per-token log-probabilities of `batch`'s `rows` under `model` (as TRL computes them for its own rows)."""
    import torch

    ids = torch.cat([batch["prompt_ids"][rows], batch["completion_ids"][rows]], dim=1)
    mask = torch.cat([batch["prompt_mask"][rows], batch["completion_mask"][rows]], dim=1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, batch["completion_ids"].shape[1],
                                                                 batch_size=trainer.args.per_device_train_batch_size)
    return logps
