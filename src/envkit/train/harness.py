"""The session factory TRL 1.16's `HarnessRolloutWorker` takes (`trl.experimental.async_grpo.openenv_harness`).

    from trl.experimental.async_grpo.openenv_harness import HarnessRolloutWorker
    from envkit.train.harness import AgentSessionFactory
    factory = AgentSessionFactory(env="coding", llm_url="http://127.0.0.1:8000/v1", model="./my-model")
    worker = HarnessRolloutWorker(harness_session_factory=factory, ...)   # AsyncGRPOTrainer(rollout_worker=worker)

The worker calls `factory(sampling=...)` once (its training policy: temperature, the rest full-vocabulary), then
`create(prompt, seed=, episode_id=)` per rollout, each on a thread of its own; a session offers
`wait_for_completion`, `fetch_training_trace` (OpenEnv's `TrainingTrace`) and `verify` (OpenEnv's `VerifyResult`
with the environment's reward), then `close`. Here a session is one agent episode (`envkit.agents.AgentEpisode`):
the environment `env` (a bundled name, env folder or module:Class) in this process, its agent in its sandbox,
every model call through a capture proxy sampling from the vLLM server at `llm_url` (`OpenAIEngine`: `vllm serve`
returns the token ids and log-probabilities a trace needs). The agent starts at `create` and runs on its own.

`AgentSessionFactory` holds settings only (strings and numbers), so it pickles into the worker's process; the proxy
is made there, at the first `create`. The row's task reaches `reset` as the seed the worker gives (a group's
rollouts share it), or as `prompt` when that is a mapping of reset arguments.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..agents import AgentEpisode
from ..capture import CaptureProxy, OpenAIEngine
from .agent_rollouts import REFERENCE, AgentSetup, episode_reward
from .captured import outcome_of

__all__ = ["AgentSessionFactory", "AgentSessions", "AgentSession"]


@dataclass
class AgentSessionFactory:
    """`harness_session_factory` for TRL's `HarnessRolloutWorker` (picklable settings; see the module)."""

    env: str
    llm_url: str
    model: str
    agent: str = REFERENCE
    timeout_s: float = 300.0
    max_calls: int = 16
    max_tokens: int = 256
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self, sampling: Mapping[str, Any] | None = None) -> AgentSessions:
        return AgentSessions(self, dict(sampling or {}))


class AgentSessions:
    """OpenEnv's `ResourceSessionFactory` contract: `create(task, seed=, episode_id=)` starts one agent episode."""

    def __init__(self, settings: AgentSessionFactory, sampling: dict[str, Any]) -> None:
        from ..app.targets import resolve_target

        self.settings = settings
        self.env_class = resolve_target(settings.env).env_class
        self.setup = AgentSetup(command=settings.agent, timeout_s=settings.timeout_s, max_calls=settings.max_calls,
                                temperature=float(sampling.get("temperature", 1.0)), max_tokens=settings.max_tokens)
        self._proxy: CaptureProxy | None = None
        self._lock = threading.Lock()

    @property
    def proxy(self) -> CaptureProxy:
        with self._lock:
            if self._proxy is None:
                engine = OpenAIEngine(self.settings.llm_url, self.settings.model,
                                      chat_template_kwargs=dict(self.settings.chat_template_kwargs))
                self._proxy = CaptureProxy(engine).start()
            return self._proxy

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> AgentSession:
        arguments = dict(task) if isinstance(task, Mapping) else {"seed": seed}
        arguments = {key: value for key, value in arguments.items() if key not in ("prompt", "environment")}
        if episode_id is not None:
            arguments.setdefault("episode_id", episode_id)
        return AgentSession(self.setup.episode(self.proxy, self.env_class()), self.setup, arguments)

    def close(self) -> None:
        """Stop the proxy (the sessions close themselves)."""
        with self._lock:
            if self._proxy is not None:
                self._proxy.close()
                self._proxy = None


class AgentSession:
    """One rollout for the worker: the agent runs from `create` on, on a thread of its own."""

    def __init__(self, episode: AgentEpisode, setup: AgentSetup, arguments: dict[str, Any]) -> None:
        self.episode, self.setup = episode, setup
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(arguments,), name="envkit-agent", daemon=True)
        self._thread.start()

    def _run(self, arguments: dict[str, Any]) -> None:
        try:
            self.result = self.setup.run(self.episode, arguments)
        except BaseException as error:  # noqa: BLE001 - handed to the worker's thread by wait_for_completion
            self.error = error

    def wait_for_completion(self, timeout_s: float | None = None) -> int:
        """Wait for the agent; its exit code. TimeoutError when it ran past its time limit (its calls so far are
        kept, as the worker expects); the episode's own error when it failed."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"the agent still runs after {timeout_s:g} s")
        if self.error is not None:
            raise self.error
        if self.result.timed_out:
            raise TimeoutError(f"the agent ran past its time limit ({self.setup.timeout_s:g} s)")
        return int(self.result.exit_code)

    def fetch_training_trace(self) -> Any:
        """The episode's calls as OpenEnv's `TrainingTrace`."""
        from openenv.core.harness import TrainingTrace

        return TrainingTrace.model_validate(self.episode.session.trace())

    def verify(self, transcript: list[dict[str, Any]], final_state: Any = None) -> Any:
        """OpenEnv's `VerifyResult`: the environment's reward (`finish_episode`), the episode done."""
        from openenv.core.harness import VerifyResult

        timed_out = bool(self.result is not None and self.result.timed_out)
        reward = episode_reward(self.episode, self.setup, timed_out)
        outcome = outcome_of(self.episode.session.trace(reward=reward), reward, timed_out)
        return VerifyResult(env_reward=reward, done=True, metrics={"tool_calls": outcome.tool_call_count})

    def close(self) -> None:
        self._thread.join(0)
        self.episode.close()
