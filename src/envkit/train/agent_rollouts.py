"""`envkit train --agent CMD|reference`: every rollout is a loop-owning agent in its environment's sandbox.

For each rollout of a generation batch, all at once (one thread each; the capture proxy batches the
generation of every session), one `envkit.agents.AgentEpisode`:

1. an instance of the environment, served here (`--env`, no `--env-url`: the agent's sandbox and the
   proxy's socket must be on this machine), reset with the rollout's row;
2. its `agent_sandbox()`, whose channel folder holds a socket of the capture proxy (`proxy.add_listener`),
   the only thing the agent can reach;
3. a capture session (`proxy.open_session`) sampling from the trainer's own model, as it is at this step
   (`policy_engine`);
4. the agent's command (`--agent`, with the environment's `agent_instruction()` as its task, `ENVKIT_TASK`)
   run in the sandbox for up to `--agent-timeout` seconds;
5. the reward: the environment's `finish_episode()`, or `--rollout-reward module:fn` called with an
   `AgentOutcome` (the fields of TRL's `HarnessRolloutOutcome`); None drops the rollout from its group;
6. `session.trace(reward=...)`: the episode's TrainingTrace, appended to `traces.jsonl` in the run folder
   and trained on as it is (`envkit.train.captured`).

An episode that fails anywhere (the environment, the sandbox, the agent) is unscorable, counted in the
run's lost episodes with its reason, and closed like every other: nothing outlives its rollout.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..agents import AgentEpisode, reference_command
from ..capture import CaptureProxy, Engine, Sampling, training_trace, write_traces
from ..environment import Environment
from ..play.binding import Tally
from .captured import AgentOutcome, Rollout, outcome_of

__all__ = ["AgentRollouts", "AgentSetup", "REFERENCE", "policy_engine", "agent_command", "episode_reward"]

logger = logging.getLogger("envkit.train")

#: `--agent reference`: the bundled agent (`envkit.agents`).
REFERENCE = "reference"


@dataclass
class AgentSetup:
    """How each rollout's agent runs: its command, time limit, reward, and sampling budget."""

    command: str
    timeout_s: float
    max_calls: int
    temperature: float
    max_tokens: int
    reward_fn: Callable[[AgentOutcome], float | None] | None = None

    def episode(self, proxy: CaptureProxy, environment: Any) -> AgentEpisode:
        """An agent episode of `environment` on `proxy`, with this setup's budget and sampling."""
        return AgentEpisode(proxy, environment, max_calls=self.max_calls,
                            sampling=Sampling(temperature=self.temperature, max_tokens=self.max_tokens))

    def run(self, episode: AgentEpisode, arguments: Mapping[str, Any]) -> Any:
        """Start `episode` with the reset `arguments` and run this setup's agent in it; how its command ended."""
        episode.start(arguments)
        return episode.run(lambda instruction: agent_command(self.command, instruction), timeout_s=self.timeout_s)


def episode_reward(episode: AgentEpisode, setup: AgentSetup, timed_out: bool) -> float | None:
    """The environment's verdict, or the user's reward function of the outcome (None: unscorable)."""
    env_reward = episode.finish()
    if setup.reward_fn is None:
        return env_reward
    reward = setup.reward_fn(outcome_of(episode.session.trace(reward=env_reward), env_reward, timed_out))
    return None if reward is None else float(reward)


def policy_engine(trainer: Any) -> tuple[Engine, Callable[[list[Any]], None] | None]:
    """The engine the agents' model calls reach, sampling from the weights as they are at this step with the chat
    template arguments training uses: the trainer's colocated vLLM (which TRL syncs before each batch), else the
    trainer's own model object (not a copy) through transformers. With it, what must run the engine's batches on
    the trainer's thread while the rollouts are waited for (colocated vLLM's `serve_until`), or None."""
    chat = dict(trainer.chat_template_kwargs or {})
    if getattr(trainer, "use_vllm", False):
        from .vllm_engine import ColocatedVLLMEngine

        colocated = ColocatedVLLMEngine(trainer.vllm_generation.llm, trainer.processing_class,
                                        chat_template_kwargs=chat)
        return colocated, colocated.serve_until
    from ..capture import TransformersEngine

    return TransformersEngine(trainer.model, trainer.processing_class, chat_template_kwargs=chat), None


def agent_command(command: str, instruction: str) -> str:
    """The shell command line of `--agent`: the bundled reference agent on `instruction`, or `command` as given
    (which reads its task from `$ENVKIT_TASK`)."""
    return reference_command(instruction) if command == REFERENCE else command


class AgentRollouts:
    """The `collect(prompts, trainer)` of `captured_rollout_func`: one agent episode per row of the batch.

    `rows_of(trainer)` gives the batch's dataset rows (the reset arguments of each rollout); traces are appended
    to `traces_path`; `tally` counts episodes, tool calls and lost episodes for the run's report.
    """

    def __init__(self, env_classes: Mapping[str, type[Environment]], setup: AgentSetup, traces_path: Any,
                 tally: Tally, rows_of: Callable[[Any], list[dict[str, Any]]]) -> None:
        self.env_classes = dict(env_classes)
        self.setup = setup
        self.traces_path = traces_path
        self.tally = tally
        self.rows_of = rows_of
        self.proxy: CaptureProxy | None = None
        self._serve: Callable[[list[Any]], None] | None = None
        self._write = threading.Lock()

    def __call__(self, prompts: list[Any], trainer: Any) -> list[Rollout]:
        if self.proxy is None:
            engine, self._serve = policy_engine(trainer)
            self.proxy = CaptureProxy(engine).start()
        rows = self.rows_of(trainer)
        with ThreadPoolExecutor(max_workers=len(rows), thread_name_prefix="envkit-agent") as pool:
            waited = [pool.submit(self._episode, row) for row in rows]
            if self._serve is not None:   # an engine that must generate on this thread (colocated vLLM)
                self._serve(waited)
            rollouts = [future.result() for future in waited]
        write_traces(self.traces_path, [rollout.trace for rollout in rollouts], append=True)
        return rollouts

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
            self.proxy = None

    def _episode(self, row: dict[str, Any]) -> Rollout:
        assert self.proxy is not None
        name = row.get("environment") if row.get("environment") in self.env_classes else next(iter(self.env_classes))
        arguments = {key: value for key, value in row.items() if key not in ("prompt", "environment")
                     and value is not None}
        try:
            episode = self.setup.episode(self.proxy, self.env_classes[name]())
        except Exception as error:  # noqa: BLE001 - an environment that cannot be built loses its episode only
            return self._lost(name, error, training_trace([]))
        try:
            timed_out = bool(self.setup.run(episode, arguments).timed_out)
            reward = episode_reward(episode, self.setup, timed_out)
            trace = episode.session.trace(reward=reward, environment=name, timed_out=timed_out)
            outcome = outcome_of(trace, reward, timed_out)
            self._count(finished=True, calls=outcome.tool_call_count, failures=outcome.tool_failure_count)
            return Rollout(trace, reward, outcome)
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
