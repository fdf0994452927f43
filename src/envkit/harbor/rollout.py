"""OpenEnv's Harbor rollouts on a Harbor task folder: what `run_rollout`, `capabilities` and `list_tasks` answer.

`openenv.harbor.client.HarborEnv` (OpenEnv 0.10) calls these three service tools of the folder's environment
with `call_tool` steps on `/ws`. A rollout resolves a task as the Task API does, starts the task's container with
a channel folder, puts a `CaptureProxy` on the channel's socket in front of the engine at `llm_url` (an
OpenAI-compatible server that returns token ids and log-probabilities, e.g. `vllm serve`), runs the bundled
`reference` agent, then the task's tests, and answers OpenEnv's `HarborRolloutResult`: the rewards, and each model
call as a `HarborTurn` with the engine's own token ids, log-probabilities and loss mask. Nothing raises: a rollout
that cannot run, or fails, comes back with `ok=false` and `error`. docs/harbor.md, "Rollouts from OpenEnv's Harbor
client", says what matches OpenEnv and what differs.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import math
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from ..agents import AgentEnvironment, AgentEpisode, reference_command
from ..capture import CaptureProxy, GenerationRequest, OpenAIEngine, Sampling
from ..core.task_refs import split_name
from ..sandbox import SandboxUnavailableError, docker_facilities
from .tasks import HarborTask

__all__ = ["RolloutRequest", "rollout", "capabilities", "LLM_URL_ENV", "LLM_MODEL_ENV", "HARNESSES"]

#: The engine a rollout uses when the call names none, and its model (default: the one the engine serves).
LLM_URL_ENV, LLM_MODEL_ENV = "ENVKIT_HARBOR_LLM_URL", "ENVKIT_HARBOR_LLM_MODEL"
#: The agents this server runs, and the sandbox a task's image runs in.
HARNESSES = ("reference",)
SANDBOX = "docker"
#: Model calls a rollout may make when `agent_step_limit` is 0.
DEFAULT_CALLS = 16
#: Characters of the agent's output kept in `agent_log_tail`.
LOG_TAIL_CHARS = 4000
#: What OpenEnv's training policy may hold besides the temperature: only values that leave the distribution whole.
NON_POLICY = {"top_p": 1.0, "top_k": -1, "min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0,
              "repetition_penalty": 1.0}
#: Every field of OpenEnv's `HarborRolloutResult`, in its order, at its default (`ok` false until the rollout ends).
DEFAULTS: dict[str, Any] = {
    "task_id": "", "task_name": "", "dataset": "", "harness": "", "sandbox": "", "trial_name": "", "session_id": "",
    "reward": None, "rewards": {}, "reward_key": "", "step_results": [], "rollout_type": "train",
    "capture_level": "tokens", "param_fixes": [], "turns": [], "conversations": [], "n_turns": 0, "n_roots": 0,
    "budget_stop_count": 0, "n_trainable_tokens": 0, "multi_turn": False, "atif": "none", "trace_source": "",
    "findings": [], "wall_s": 0.0, "phase_timings": {}, "agent_log_tail": "", "ok": False, "error": None,
    "exception_type": None}


class RolloutFailed(Exception):
    """What stops a rollout before or while it runs; the message is the result's `error`."""


class TaskEpisodes(AgentEnvironment, Protocol):
    """What a rollout uses of a Harbor environment (`HarborEnvironment`): the agent contract, its tasks, and the
    finished episode's reward.json keys."""

    BY_NAME: dict[str, HarborTask]

    def splits(self) -> list[str]: ...
    def tasks(self, split: str) -> Any: ...
    def reward_components(self) -> tuple[dict[str, float], str | None]: ...


@dataclass(frozen=True)
class RolloutRequest:
    """The arguments of OpenEnv's `run_rollout` (their meaning is OpenEnv's; see the tool's docstring)."""

    split: str = ""
    task_index: int = 0
    harness: str = "reference"
    sandbox: str = SANDBOX
    reward_key: str = ""
    keep_sandbox: bool = False
    force_build: bool = False
    llm_url: str = ""
    model: str = ""
    api_key: str = ""
    auth_header: str = ""
    agent_timeout_sec: float = 0.0
    agent_step_limit: int = 0
    sampling: dict[str, Any] | None = None
    provider: str = "openai"
    purpose: str = "auto"
    eval_sampling: dict[str, Any] | None = None


@dataclass
class Result:
    """A `HarborRolloutResult` as it is filled in."""

    fields: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def timed(self, phase: str, call: Callable[[], Any]) -> Any:
        started = time.monotonic()
        try:
            return call()
        finally:
            self.timings[phase] = round(time.monotonic() - started, 3)


def rollout(env: TaskEpisodes, request: RolloutRequest) -> str:
    """Run one rollout of `request` on `env`'s session; `HarborRolloutResult` as JSON text."""
    started = time.monotonic()
    result = Result({**copy.deepcopy(DEFAULTS), "harness": request.harness, "sandbox": request.sandbox})
    try:
        _run(env, request, result)
    except RolloutFailed as failed:
        result.fields["error"] = str(failed)
    except Exception as error:   # the rollout's own failure is its result; the session carries on
        result.fields.update(error=f"{type(error).__name__}: {error}", exception_type=type(error).__name__)
    result.fields.update(phase_timings=result.timings, wall_s=round(time.monotonic() - started, 3))
    return json.dumps(result.fields)


def _run(env: TaskEpisodes, request: RolloutRequest, result: Result) -> None:
    split, task = _task(env, request.split, request.task_index)
    result.fields.update(task_id=str(task.path), task_name=task.name, dataset=split)
    _check_arguments(request)
    sampling, rollout_type = _sampling(request)
    result.fields["rollout_type"] = rollout_type
    engine = result.timed("probe", lambda: _engine(request))
    result.fields["param_fixes"] = _notes(request)
    episode_id = uuid.uuid4().hex
    result.fields["trial_name"] = f"{task.name}__{episode_id[:8]}"
    budget = request.agent_step_limit or DEFAULT_CALLS
    timeout = request.agent_timeout_sec or task.agent_timeout_s
    with CaptureProxy(engine, port=None) as proxy:
        episode = AgentEpisode(proxy, env, max_calls=budget, sampling=sampling)
        result.fields["session_id"] = episode.session.session_id
        try:
            result.timed("sandbox_start", lambda: episode.start({"task_id": task.name, "episode_id": episode_id}))
            ran = result.timed("agent", lambda: episode.run(
                lambda instruction: reference_command(instruction, max_turns=budget, model=engine.model_name),
                timeout_s=timeout))
            result.timed("verify", episode.finish)
            rewards, verifier_error = env.reward_components()
        finally:
            episode.close(keep_sandbox=request.keep_sandbox)
    session = episode.session
    trace = session.trace()["turns"]
    findings = [f"the agent ran past its {timeout:g} s"] if ran.timed_out else \
        [f"the agent exited with {ran.exit_code}"] if ran.exit_code else []
    trainable_tokens = sum(len(turn["completion_token_ids"]) for turn in trace)
    result.fields.update(
        rewards=rewards, turns=[_turn(turn) for turn in trace], conversations=_conversations(trace),
        n_turns=len(trace), n_roots=session.roots, multi_turn=len(trace) > session.roots,
        budget_stop_count=session.refused, n_trainable_tokens=trainable_tokens, findings=findings,
        agent_log_tail=(ran.stdout + ran.stderr)[-LOG_TAIL_CHARS:])
    if verifier_error:
        raise RolloutFailed(f"the task's tests gave no reward: {verifier_error}")
    result.fields["reward"], result.fields["reward_key"] = _pick_reward(rewards, request.reward_key)
    if rollout_type == "train" and not trainable_tokens:
        raise RolloutFailed("a train rollout without a trainable token: the agent made no model call "
                            f"(its output ends: {(ran.stdout + ran.stderr).strip()[-300:]!r})")
    result.fields["ok"] = True


def _task(env: TaskEpisodes, split: str, index: int) -> tuple[str, HarborTask]:
    """The split a call names ("" is the first) and its task at `index`, as the Task API resolves them."""
    name = split_name(type(env), split)
    if name not in env.splits():
        raise RolloutFailed(f"unknown split {split!r}; this server's splits are {', '.join(map(repr, env.splits()))}")
    tasks = env.tasks(name)
    if not 0 <= index < len(tasks):
        raise RolloutFailed(f"task_index {index} is out of range: split {name!r} has {len(tasks)} tasks "
                            f"(indices 0 to {len(tasks) - 1})")
    return name, env.BY_NAME[tasks[index]["task_id"]]


def _check_arguments(request: RolloutRequest) -> None:
    """Refuse what this server does not run: another harness, sandbox or API, negative limits."""
    if request.agent_step_limit < 0 or request.agent_timeout_sec < 0:
        raise RolloutFailed("agent_step_limit and agent_timeout_sec must be 0 (the default) or positive")
    if request.harness not in HARNESSES:
        raise RolloutFailed(f"unknown harness {request.harness!r}; this server runs: {', '.join(HARNESSES)} "
                            "(envkit's bundled agent)")
    if request.sandbox == "local":
        raise RolloutFailed("sandbox 'local' cannot run a Harbor task: a task runs in its own image, which only the "
                            "docker sandbox starts; use sandbox='docker'")
    if request.sandbox != SANDBOX:
        raise RolloutFailed(f"sandbox {request.sandbox!r} is not available on this server; it runs: docker")
    if request.provider != "openai":
        raise RolloutFailed(f"provider {request.provider!r} is not supported: the capture proxy serves the OpenAI "
                            "chat-completions API only (provider='openai')")


def _sampling(request: RolloutRequest) -> tuple[Sampling, str]:
    """The capture session's sampling policy and the rollout's type, checked as OpenEnv checks them."""
    if request.purpose not in ("auto", "train", "eval"):
        raise RolloutFailed("purpose must be auto, eval, or train")
    if request.purpose == "eval":
        if request.sampling is not None:
            raise RolloutFailed("eval purpose cannot apply a training sampling override")
        return _eval_sampling(request.eval_sampling or {}), "eval"
    if request.eval_sampling is not None:
        raise RolloutFailed("eval_sampling applies to purpose='eval' only")
    if request.sampling is None:
        return Sampling(), "train"
    unknown = set(request.sampling) - {"temperature", *NON_POLICY}
    if unknown:
        raise RolloutFailed(f"unsupported training sampling fields: {', '.join(sorted(unknown))}")
    temperature = request.sampling.get("temperature")
    if not _number(temperature) or not 0 < temperature < math.inf:
        raise RolloutFailed("training sampling requires a finite positive temperature")
    for key, value in request.sampling.items():
        if key != "temperature" and not (_number(value) and (value == NON_POLICY[key] or (key, value) == ("top_k", 0))):
            raise RolloutFailed(f"training sampling requires {key}={NON_POLICY[key]}")
    return Sampling(temperature=float(temperature)), "train"


def _eval_sampling(values: dict[str, Any]) -> Sampling:
    if set(values) - {"temperature", "top_p", "top_k"} or not all(_number(v) and math.isfinite(v)
                                                                  for v in values.values()):
        raise RolloutFailed("eval_sampling takes temperature, top_p and top_k only, each a finite number")
    temperature, top_p = values.get("temperature", 1.0), values.get("top_p", 1.0)
    if not 0 < temperature <= 2:
        raise RolloutFailed("eval temperature must be in (0, 2] here: the capture proxy samples, it does not decode "
                            "greedily")
    if not 0 < top_p <= 1:
        raise RolloutFailed("eval top_p must be in (0, 1]")
    if values.get("top_k", -1) != -1:
        raise RolloutFailed("eval top_k must be -1 here: the engine samples from the whole vocabulary")
    return Sampling(temperature=float(temperature), top_p=float(top_p))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _engine(request: RolloutRequest) -> OpenAIEngine:
    """The engine at `llm_url` (or the server's), its model resolved, probed for token ids and log-probabilities."""
    url = (request.llm_url or os.environ.get(LLM_URL_ENV, "")).rstrip("/")
    if not url:
        raise RolloutFailed(f"no engine: give llm_url (an OpenAI-compatible server that returns token ids and "
                            f"log-probabilities, such as vllm serve), or start the server with {LLM_URL_ENV} set")
    headers = {}
    if request.api_key:
        header = request.auth_header or "Authorization"
        headers[header] = f"Bearer {request.api_key}" if header.lower() == "authorization" else request.api_key
    model = request.model or (os.environ.get(LLM_MODEL_ENV, "") if not request.llm_url else "") or \
        _served_model(url, headers)
    try:
        tokenizer = _tokenizer(model)
    except Exception as error:
        raise RolloutFailed(f"cannot load the tokenizer of model {model!r}: {type(error).__name__}: {error}; the "
                            "model must be a folder this server can read, as `vllm serve FOLDER` names it") from None
    engine = OpenAIEngine(url, model, tokenizer=tokenizer)
    engine.headers = headers
    asyncio.run(_probe(engine))
    return engine


def _served_model(url: str, headers: dict[str, str]) -> str:
    import httpx

    try:
        listed = httpx.get(f"{url}/models", headers=headers, timeout=30, trust_env=False).raise_for_status().json()
        models = [entry["id"] for entry in listed["data"]]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as error:
        raise RolloutFailed(f"cannot list the models of the engine at {url} ({error}); name one with model=") \
            from None
    if len(models) != 1:
        raise RolloutFailed(f"the engine at {url} serves {len(models)} models ({', '.join(models)}); name one with "
                            "model=")
    return models[0]


@functools.lru_cache(maxsize=4)
def _tokenizer(model: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model)


async def _probe(engine: OpenAIEngine) -> None:
    """One sampled token: the engine must return its id and log-probability (OpenEnv's `tokens` capture level)."""
    from ..capture import EngineError

    try:
        await engine.generate([GenerationRequest(engine.tokenizer.encode("Hello"), Sampling(max_tokens=1))])
    except EngineError as error:
        raise RolloutFailed(f"{error}; this server records rollouts at the token level only") from None
    finally:
        await engine.aclose()


def _notes(request: RolloutRequest) -> list[str]:
    """How the server took arguments it cannot follow to the letter (OpenEnv's `param_fixes`)."""
    notes = []
    if request.force_build:
        notes.append("force_build: a task's image is tagged by the hash of its environment folder, so a changed "
                     "task is always built anew and an unchanged one reused")
    if request.keep_sandbox:
        notes.append("keep_sandbox: the task's container stays until this session's next rollout or its end")
    return notes


def _pick_reward(rewards: dict[str, float], reward_key: str) -> tuple[float | None, str]:
    """The headline reward: `reward_key` (or the first of a comma list found), else the only key, else `reward`."""
    if not rewards:
        return None, ""
    if reward_key:
        for key in [reward_key] + [key.strip() for key in reward_key.split(",")]:
            if key in rewards:
                return rewards[key], key
        raise RolloutFailed(f"reward_key {reward_key!r} not in {sorted(rewards)}")
    if len(rewards) == 1:
        [(key, value)] = rewards.items()
        return value, key
    if "reward" in rewards:
        return rewards["reward"], "reward"
    raise RolloutFailed(f"task produced several rewards {sorted(rewards)} and none is named 'reward'. Pass "
                        "reward_key= to say which one is the training signal.")


#: What a `HarborTurn` takes as it is from a `TrainingTrace` turn.
TOKEN_FIELDS = ("node_id", "prompt_token_ids", "completion_token_ids", "per_token_logps", "loss_mask")


def _turn(turn: dict[str, Any]) -> dict[str, Any]:
    """One turn of the session's `TrainingTrace` as OpenEnv's `HarborTurn`."""
    metadata, tools = turn["metadata"], turn["request"].get("tools")
    choice = turn["response"]["choices"][0]
    calls = [{"name": tool_call["function"]["name"], "arguments": _parsed(tool_call["function"].get("arguments"))}
             for tool_call in choice["message"].get("tool_calls") or ()]
    return {"turn": metadata["index"], "role": "agent", "finish_reason": choice["finish_reason"],
            **{name: turn[name] for name in TOKEN_FIELDS}, "n_tools": len(tools or ()), "discarded": False,
            "trainable": bool(turn["completion_token_ids"]), "sampling_params": dict(metadata["sampling"]),
            "requested_sampling_params": dict(metadata["requested_sampling"]),
            "text": choice["message"].get("content") or "", "tool_calls": calls,
            "request_messages": list(turn["request"]["messages"]), "request_tools": tools}


def _parsed(arguments: Any) -> Any:
    try:
        return json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return arguments


def _conversations(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each chain of calls (a root and what continued it): its last request's messages and the reply."""
    chains: dict[str, list[dict[str, Any]]] = {}
    for turn in trace:
        chains.setdefault(turn["metadata"]["root_id"], []).append(turn)
    return [{"root_id": root, "role": "agent", "n_turns": len(turns),
             "messages": [*turns[-1]["request"]["messages"], turns[-1]["response"]["choices"][0]["message"]]}
            for root, turns in chains.items()]


def capabilities(env_class: Any) -> str:
    """OpenEnv's `capabilities()` answer for a Harbor task folder's environment class, as JSON text."""
    try:
        docker_facilities()
        docker = {"name": SANDBOX, "available": True, "detail": "each rollout in its task's container"}
    except SandboxUnavailableError as error:
        docker = {"name": SANDBOX, "available": False, "detail": str(error)}
    local = {"name": "local", "available": False, "detail": "a Harbor task runs in its own image, which only the "
                                                              "docker sandbox starts"}
    harness = {"name": "reference", "dialect": "openai_chat", "kind": "installed", "status": "validated",
               "needs_subclass": False, "notes": "envkit's bundled agent: a shell tool, the standard library only, "
                                                 "run in the task's container"}
    llm = {"url": os.environ.get(LLM_URL_ENV, ""), "model": os.environ.get(LLM_MODEL_ENV, "")}
    datasets = [{"name": split, "num_tasks": len(env_class.tasks(split))} for split in env_class.splits()]
    return json.dumps({"harnesses": [harness], "sandboxes": [docker, local], "datasets": datasets, "llm": llm})
