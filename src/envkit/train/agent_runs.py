"""`envkit train --agent CMD|reference`: every rollout is a loop-owning agent in its environment's sandbox.

For each rollout of a generation batch, all at once (one thread each; the capture proxy batches the
generation of every session):

1. an instance of the environment, served here (`--env`, no `--env-url`: the agent's sandbox and the
   proxy's socket must be on this machine), reset with the rollout's row;
2. its `agent_sandbox(channel_dir=...)`, whose channel folder holds a socket of the capture proxy
   (`proxy.add_listener`), the only thing the agent can reach;
3. a capture session (`proxy.open_session`) sampling from the trainer's own model, as it is at this step
   (`TransformersEngine(trainer.model, ...)`);
4. `run_agent(sandbox, CMD, session=..., timeout_s=--agent-timeout)` with the environment's
   `agent_instruction()` as the agent's task (`ENVKIT_TASK`);
5. the reward: the environment's `finish_episode()`, or `--rollout-reward module:fn` called with an
   `AgentOutcome` (the fields of TRL's `HarnessRolloutOutcome`); None drops the rollout from its group;
6. `session.trace(reward=...)`: the episode's TrainingTrace, appended to `traces.jsonl` in the run folder
   and trained on as it is (`envkit.train.captured`).

An episode that fails anywhere (the environment, the sandbox, the agent) is unscorable, counted in the
run's lost episodes with its reason, and closed like every other: nothing outlives its rollout.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..environment import Environment
from ..errors import ConfigurationError
from ..play.binding import Tally
from .captured import Rollout

__all__ = ["AgentOutcome", "AgentEpisode", "AgentRollouts", "AgentSetup", "REFERENCE", "require_agent_parts",
           "rollout_reward_fn", "outcome_of", "policy_engine", "agent_command", "TASK_VARIABLE"]

logger = logging.getLogger("envkit.train")

#: `--agent reference`: the bundled agent (`envkit.agents`).
REFERENCE = "reference"
#: The environment variable that hands the agent its task (the environment's `agent_instruction()`).
TASK_VARIABLE = "ENVKIT_TASK"
#: Words that mark a tool result as a failure when counting the agent's failed tool calls (as TRL's harness counts).
FAILURE_WORDS = ("error", "failed", "traceback", "exception")


def require_agent_parts() -> None:
    """Raise `ConfigurationError` unless the capture proxy and the agent runner are importable."""
    import importlib.util

    missing = [name for name in ("envkit.capture", "envkit.agents") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigurationError(f"--agent needs {' and '.join(missing)}, which this envkit lacks: install an envkit "
                                 "that ships them")


@dataclass
class AgentOutcome:
    """What `--rollout-reward module:fn` receives: the fields of TRL 1.16's `HarnessRolloutOutcome`."""

    env_reward: float | None
    completion: list[dict[str, Any]]
    trace: list[dict[str, Any]]
    tool_call_count: int
    tool_failure_count: int
    tool_calls_by_name: dict[str, int]
    timed_out: bool


@dataclass
class AgentSetup:
    """How each rollout's agent runs: its command, time limit, reward, and sampling budget."""

    command: str
    timeout_s: float
    max_calls: int
    temperature: float
    max_tokens: int
    reward_fn: Callable[[AgentOutcome], float | None] | None = None


def rollout_reward_fn(spec: str) -> Callable[[AgentOutcome], float | None]:
    """`--rollout-reward module:fn` (a module importable from here or the working folder)."""
    from ..app.targets import import_attribute

    if ":" not in spec:
        raise ConfigurationError(f"--rollout-reward {spec!r}: name a function as module:function")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    function = import_attribute(spec)
    if not callable(function):
        raise ConfigurationError(f"--rollout-reward {spec}: {function!r} is not a function")
    return function


def policy_engine(trainer: Any) -> Any:
    """The engine the agents' model calls reach, sampling from the weights as they are at this step with the chat
    template arguments training uses: the trainer's colocated vLLM (which TRL syncs before each batch), else the
    trainer's own model object (not a copy) through transformers."""
    chat = dict(trainer.chat_template_kwargs or {})
    if getattr(trainer, "use_vllm", False):
        from .vllm_engine import ColocatedVLLMEngine

        return ColocatedVLLMEngine(trainer.vllm_generation.llm, trainer.processing_class, chat_template_kwargs=chat)
    from ..capture import TransformersEngine

    return TransformersEngine(trainer.model, trainer.processing_class, chat_template_kwargs=chat)


def agent_command(command: str, instruction: str) -> str:
    """The shell command line of `--agent`: the bundled reference agent on `instruction`, or `command` as given
    (which reads its task from `$ENVKIT_TASK`)."""
    if command != REFERENCE:
        return command
    from ..agents import reference_command

    return reference_command(instruction)


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


class AgentRollouts:
    """The `collect(prompts, trainer)` of `captured_rollout_func`: one agent episode per row of the batch.

    `rows_of(trainer)` gives the batch's dataset rows (the reset arguments of each rollout); traces are appended
    to `traces_path`; `tally` counts episodes, tool calls and lost episodes for the run's report.
    """

    def __init__(self, env_classes: Mapping[str, type[Environment]], setup: AgentSetup, traces_path: Path,
                 tally: Tally, rows_of: Callable[[Any], list[dict[str, Any]]]) -> None:
        self.env_classes = dict(env_classes)
        self.setup = setup
        self.traces_path = traces_path
        self.tally = tally
        self.rows_of = rows_of
        self.proxy: Any = None
        self.engine: Any = None
        self._write = threading.Lock()

    def __call__(self, prompts: list[Any], trainer: Any) -> list[Rollout]:
        if self.proxy is None:
            from ..capture import CaptureProxy

            self.engine = policy_engine(trainer)
            self.proxy = CaptureProxy(self.engine).start()
        rows = self.rows_of(trainer)
        with ThreadPoolExecutor(max_workers=len(rows), thread_name_prefix="envkit-agent") as pool:
            waited = [pool.submit(self._episode, row) for row in rows]
            serve = getattr(self.engine, "serve_until", None)
            if serve is not None:   # an engine that must generate on this thread (colocated vLLM)
                serve(waited)
            rollouts = [future.result() for future in waited]
        from ..capture import write_traces

        write_traces(self.traces_path, [rollout.trace for rollout in rollouts], append=True)
        return rollouts

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
            self.proxy = None

    def _episode(self, row: dict[str, Any]) -> Rollout:
        name = row.get("environment") if row.get("environment") in self.env_classes else next(iter(self.env_classes))
        arguments = {key: value for key, value in row.items() if key not in ("prompt", "environment")
                     and value is not None}
        try:
            episode = AgentEpisode(self.proxy, self.env_classes[name](), self.setup)
        except Exception as error:  # noqa: BLE001 - an environment that cannot be built loses its episode only
            return self._lost(name, error, {"schema_version": 1, "turns": []})
        try:
            result = episode.run(arguments)
            reward = episode.reward(bool(result.timed_out))
            trace = episode.session.trace(reward=reward, environment=name, timed_out=bool(result.timed_out))
            outcome = outcome_of(trace, reward, bool(result.timed_out))
            self._count(finished=True, calls=outcome.tool_call_count, failures=outcome.tool_failure_count)
            return Rollout(trace, reward, outcome.tool_call_count, outcome.tool_failure_count, bool(result.timed_out))
        except Exception as error:  # noqa: BLE001 - any failure of the episode makes it unscorable, and is counted
            return self._lost(name, error, episode.session.trace(reward=None, environment=name, lost=str(error)))
        finally:
            episode.close()

    def _lost(self, name: str, error: Exception, trace: dict[str, Any]) -> Rollout:
        reason = f"{name}: {type(error).__name__}: {error}"
        logger.warning("agent episode lost (%s)", reason)
        self._count(finished=False, lost=reason)
        return Rollout(trace, None)

    def _count(self, *, finished: bool, calls: int = 0, failures: int = 0, lost: str | None = None) -> None:
        with self._write:
            tally = self.tally
            tally.episodes += 1
            tally.finished += finished
            tally.tool_calls += calls
            tally.tool_errors += failures
            if lost is not None:
                tally.lost += 1
                tally.lost_reasons.append(lost)


class AgentEpisode:
    """One agent episode: an environment instance, a capture session on `proxy`, and the agent's run.

    `run(arguments)` resets the environment, gives its sandbox a socket of the proxy in a channel folder of its
    own and runs the agent there; `reward(timed_out)` asks the environment's verifier (`finish_episode`) and, when
    set, the user's `reward_fn`; `close()` ends the session, the environment (its sandbox) and the socket.
    """

    def __init__(self, proxy: Any, environment: Any, setup: AgentSetup) -> None:
        from ..capture import Sampling

        self.proxy, self.environment, self.setup = proxy, environment, setup
        self.session = proxy.open_session(max_calls=setup.max_calls,
                                          sampling=Sampling(temperature=setup.temperature, max_tokens=setup.max_tokens))
        self._channel = tempfile.TemporaryDirectory(prefix="envkit-channel-")
        self._socket: str | None = None

    def run(self, arguments: dict[str, Any]) -> Any:
        """Reset, run the agent in the environment's sandbox; how its command ended (`RunResult`)."""
        from ..agents import run_agent

        self.environment.reset(**arguments)
        self._socket = self.proxy.add_listener(os.path.join(self._channel.name, "proxy.sock"))
        sandbox = self.environment.agent_sandbox(channel_dir=self._channel.name)
        instruction = self.environment.agent_instruction()
        return run_agent(sandbox, agent_command(self.setup.command, instruction), session=self.session,
                         timeout_s=self.setup.timeout_s, env={TASK_VARIABLE: instruction})

    def reward(self, timed_out: bool) -> float | None:
        """The environment's verdict, or the user's reward function of the outcome (None: unscorable)."""
        env_reward = self.environment.finish_episode()
        env_reward = None if env_reward is None else float(env_reward)
        if self.setup.reward_fn is None:
            return env_reward
        reward = self.setup.reward_fn(outcome_of(self.session.trace(reward=env_reward), env_reward, timed_out))
        return None if reward is None else float(reward)

    def close(self) -> None:
        try:
            self.session.close()
            self.environment.close()
        finally:
            if self._socket is not None:
                self.proxy.remove_listener(self._socket)
            self._channel.cleanup()
