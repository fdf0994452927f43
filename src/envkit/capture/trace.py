"""Recorded calls as OpenEnv's `TrainingTrace` (schema version 1), and `traces.jsonl`.

One trace per rollout; each call a turn: `node_id`, `prompt_token_ids`, `completion_token_ids`,
`per_token_logps` (one per sampled id), and `loss_mask` over prompt and completion (0 on every prompt position,
1 on every sampled one). The schema is strict (no other fields): the links between turns (`parent_id`,
`root_id`), the reward and the rollout's metadata travel in each turn's `metadata`; `request` holds the
messages and tools the agent sent and `response` the chat completion it got back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from .records import Call

__all__ = ["training_trace", "write_traces", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1


def _turn(call: Call, index: int, reward: float | None, session_id: str, metadata: dict[str, Any]
          ) -> dict[str, Any]:
    request: dict[str, Any] = {"messages": call.messages}
    if call.tools:
        request["tools"] = call.tools
    return {
        "node_id": call.node_id,
        "prompt_token_ids": list(call.prompt_ids),
        "completion_token_ids": list(call.completion_ids),
        "per_token_logps": [float(value) for value in call.logprobs],
        "loss_mask": [0] * len(call.prompt_ids) + [1] * len(call.completion_ids),
        "request": request,
        "response": call.response,
        "metadata": {"index": index, "parent_id": call.parent_id, "root_id": call.root_id,
                     "session_id": session_id, "finish_reason": call.finish_reason,
                     "new_prompt_tokens": call.new_prompt_tokens, "root_reason": call.root_reason,
                     "sampling": call.sampling, "requested_sampling": call.requested_sampling,
                     "reward": reward, "rollout": metadata},
    }


def training_trace(calls: Iterable[Call], *, reward: float | None = None, session_id: str = "",
                   metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `TrainingTrace` of `calls`, in order, as a JSON-able dict."""
    return {"schema_version": SCHEMA_VERSION,
            "turns": [_turn(call, index, reward, session_id, dict(metadata or {}))
                      for index, call in enumerate(calls)]}


def write_traces(path: str | Path, traces: Iterable[dict[str, Any]], *, append: bool = False) -> Path:
    """Write `traces` (from `CaptureSession.trace`) to `path` (a run's `traces.jsonl`), one JSON line each;
    `append` adds to the file instead of replacing it. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as out:
        for trace in traces:
            out.write(json.dumps(trace, separators=(",", ":")) + "\n")
    return path
