"""Run rollouts with OpenEnv 0.10.0's Harbor client; run with the OpenEnv venv's python.

    python harbor_rollout.py URL LLM_URL   → JSON lines: {"capabilities": ...}, {"rollout": ...}, then {"refused": ...}

It connects as OpenEnv's docs show (`with HarborEnv(base_url=URL) as env`), asks `capabilities()`, runs one rollout of
the first task of split "test" with the reference agent in docker against the engine at LLM_URL, and validates the
result's JSON with OpenEnv's own `HarborRolloutResult` and `HarborTurn`, made strict (an unknown field is an error).
Then it records how bad calls come back: rollouts that cannot run (`ok`, `error`), and tool errors (the client's
RuntimeError message).
"""

import json
import sys
from typing import Any

from openenv.harbor.client import HarborEnv, _as_text
from openenv.harbor.models import HarborRolloutResult, HarborTurn
from pydantic import ConfigDict

URL, LLM_URL = sys.argv[1], sys.argv[2]


class StrictTurn(HarborTurn):
    model_config = ConfigDict(extra="forbid")


class StrictResult(HarborRolloutResult):
    model_config = ConfigDict(extra="forbid")
    turns: list[StrictTurn] = []


class Recording(HarborEnv):
    """HarborEnv, keeping the raw text of the last tool result its own `run_rollout` parsed."""

    raw = ""

    def _call(self, name: str, **kwargs: Any) -> Any:
        answer = super()._call(name, **kwargs)
        self.raw = _as_text(answer)
        return answer


def emit(**line: Any) -> None:
    print(json.dumps(line), flush=True)


def outcome(env: Recording, **arguments: Any) -> dict[str, Any]:
    """A rollout that should not run: its `ok` and `error`, or the tool error the client raised."""
    try:
        result = env.run_rollout(**arguments)
    except RuntimeError as error:
        return {"raised": str(error)}
    return {"ok": result.ok, "error": result.error, "harness": result.harness, "sandbox": result.sandbox}


def tool_error(env: Recording, name: str, **arguments: Any) -> str | None:
    try:
        env._call(name, **arguments)
    except RuntimeError as error:
        return str(error)
    return None


with Recording(base_url=URL) as env:
    emit(capabilities=env.capabilities())
    result = env.run_rollout(split="test", task_index=0, harness="reference", sandbox="docker", llm_url=LLM_URL,
                             sampling={"temperature": 1.0}, agent_step_limit=3)
    StrictResult.model_validate_json(env.raw)
    emit(rollout=result.model_dump(), trainable=result.trainable,
         all_fields_in_order=list(json.loads(env.raw)) == list(HarborRolloutResult.model_fields))
    engine = {"split": "test", "harness": "reference", "sandbox": "docker", "llm_url": LLM_URL}
    emit(refused={
        "opencode": outcome(env, **{**engine, "harness": "opencode"}),
        "e2b": outcome(env, **{**engine, "sandbox": "e2b"}),
        "local": outcome(env, **{**engine, "sandbox": "local"}),
        "no_split": outcome(env, **{**engine, "split": "nope"}),
        "no_task": outcome(env, **{**engine, "task_index": 99}),
        "no_engine": outcome(env, **{**engine, "llm_url": ""}),
        "cold": outcome(env, **engine, sampling={"temperature": 0}),
        "nucleus": outcome(env, **engine, sampling={"temperature": 1.0, "top_p": 0.9}),
        "unknown_argument": tool_error(env, "run_rollout", split="test", nope=1),
        "wrong_type": tool_error(env, "run_rollout", task_index="x"),
        "unknown_tool": tool_error(env, "nope"),
        "tasks": json.loads(_as_text(env._call("list_tasks", split="test", start=0, stop=5))),
    })
