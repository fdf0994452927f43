"""Captured episodes (OpenEnv `TrainingTrace` dicts, schema version 1) as the rows TRL's GRPO trains on.

    from envkit.train.trace_rows import trace_rows
    rows = trace_rows(trace)   # [TraceRow(prompt_ids, completion_ids, logprobs, env_mask), ...]

A trace holds one turn per engine call: the exact prompt ids the engine saw, the ids it sampled, one
log-probability per sampled id, and a loss mask over prompt + completion (0 on every prompt position,
as OpenEnv's model requires). Nothing is re-tokenised: a row is made of those ids and masks as they are.

Turns are linked by exact token prefix. A turn whose prompt starts with all of an earlier sequence's ids
(its last prompt and completion) continues that sequence; any other turn starts a new one (a root: the
agent rewrote its history, or called the model on the side). A sequence becomes one row: the ids of its
last turn, split after its first turn's prompt; every turn's sampled ids keep their own loss mask and
log-probabilities at their own positions, and everything between them (tool results, the next turn's
chat markup) is context, mask 0 and log-probability 0.0, as TRL's own tool loop marks tool tokens (a
sampled id the capture left untrained is context too). A sequence with no trained token makes no row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..capture import SCHEMA_VERSION

__all__ = ["TraceRow", "TraceError", "trace_rows"]


class TraceError(ValueError):
    """A trace that is not a valid TrainingTrace (schema version 1); the message says what was wrong."""


@dataclass
class TraceRow:
    """One GRPO row, in the fields TRL's `rollout_func` returns (`env_mask`: 1 on sampled ids that train)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    env_mask: list[int]

    @property
    def trained_tokens(self) -> int:
        return sum(self.env_mask)


@dataclass
class _Turn:
    prompt: list[int]
    completion: list[int]
    logprobs: list[float]
    mask: list[int]   # over the completion only (the prompt's part is checked to be 0)


def trace_rows(trace: Mapping[str, Any]) -> list[TraceRow]:
    """The rows of one captured episode: one per sequence of turns linked by token prefix (see the module)."""
    turns = [_turn(item, index) for index, item in enumerate(_turn_items(trace))]
    sequences: list[list[_Turn]] = []
    for turn in turns:
        extended = [chain for chain in sequences if _continues(chain[-1], turn)]
        if extended:
            max(extended, key=lambda chain: len(chain[-1].prompt)).append(turn)
        else:
            sequences.append([turn])
    rows = [_row(chain) for chain in sequences]
    return [row for row in rows if row.trained_tokens]


def _turn_items(trace: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    if not isinstance(trace, Mapping):
        raise TraceError(f"a trace is a JSON object (TrainingTrace), got {type(trace).__name__}")
    version = trace.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise TraceError(f"trace schema_version {version!r} is not supported: this reads TrainingTrace "
                         f"schema_version {SCHEMA_VERSION}")
    turns = trace.get("turns")
    if not isinstance(turns, list) or not all(isinstance(turn, Mapping) for turn in turns):
        raise TraceError("a trace's 'turns' must be a list of turn objects")
    return turns


def _turn(item: Mapping[str, Any], index: int) -> _Turn:
    where = f"trace turn {index} ({item.get('node_id', 'no node_id')})"
    prompt, completion = _ids(item, "prompt_token_ids", where), _ids(item, "completion_token_ids", where)
    logprobs, mask = item.get("per_token_logps"), item.get("loss_mask")
    if not isinstance(logprobs, list) or len(logprobs) != len(completion):
        raise TraceError(f"{where}: per_token_logps must hold one log-probability per completion id "
                         f"({len(completion)})")
    if any(isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value > 0
           for value in logprobs):
        raise TraceError(f"{where}: per_token_logps must be finite numbers, none above 0")
    if not isinstance(mask, list) or len(mask) != len(prompt) + len(completion):
        raise TraceError(f"{where}: loss_mask must cover prompt and completion ({len(prompt) + len(completion)} "
                         "entries)")
    if any(type(value) is not int or value not in (0, 1) for value in mask):
        raise TraceError(f"{where}: loss_mask entries must be 0 or 1")
    if any(mask[:len(prompt)]):
        raise TraceError(f"{where}: loss_mask marks prompt positions; only sampled ids may train")
    return _Turn(prompt, completion, [float(value) for value in logprobs], mask[len(prompt):])


def _ids(item: Mapping[str, Any], key: str, where: str) -> list[int]:
    ids = item.get(key)
    if not isinstance(ids, list) or any(type(token) is not int or token < 0 for token in ids):
        raise TraceError(f"{where}: {key} must be a list of non-negative integer token ids")
    return ids


def _continues(last: _Turn, turn: _Turn) -> bool:
    """Whether `turn`'s prompt starts with all of `last`'s ids (its prompt, then its completion)."""
    size = len(last.prompt)
    return (len(turn.prompt) >= size + len(last.completion) and turn.prompt[:size] == last.prompt
            and turn.prompt[size:size + len(last.completion)] == last.completion)


def _row(chain: list[_Turn]) -> TraceRow:
    last = chain[-1]
    ids = last.prompt + last.completion
    mask, logprobs = [0] * len(ids), [0.0] * len(ids)
    for turn in chain:
        start, end = len(turn.prompt), len(turn.prompt) + len(turn.completion)
        mask[start:end] = turn.mask
        logprobs[start:end] = [value if trained else 0.0 for value, trained in zip(turn.logprobs, turn.mask,
                                                                                   strict=True)]
    split = len(chain[0].prompt)
    return TraceRow(ids[:split], ids[split:], logprobs[split:], mask[split:])
