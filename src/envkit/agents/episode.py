"""One loop-owning agent's episode on an environment that offers agents, its model calls through a capture proxy.

    episode = AgentEpisode(proxy, environment, max_calls=16, sampling=Sampling(temperature=1.0))
    try:
        episode.start({"task_id": "HumanEval/0"})
        ran = episode.run(reference_command, timeout_s=600)
        reward = episode.finish()
        trace = episode.session.trace(reward=reward)
    finally:
        episode.close()

The environment keeps the agent contract (`AgentEnvironment`); the episode resets it and takes its sandbox for an
agent (a channel folder of the sandbox's own) with the proxy listening on the channel's socket (`start`), runs the
agent there with its task in `$ENVKIT_TASK` (`run`), asks the environment for the reward (`finish`), and closes
what it opened. Harbor's
`run_rollout`, `envkit train --agent` and TRL's harness worker all run their episodes this way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from ..capture import CaptureProxy, CaptureSession, Sampling
from ..sandbox import RunResult, Sandbox
from .run import SOCKET_NAME, run_agent

__all__ = ["AgentEnvironment", "AgentEpisode", "TASK_VARIABLE"]

#: The environment variable that hands the agent its task (the environment's `agent_instruction()`).
TASK_VARIABLE = "ENVKIT_TASK"


@runtime_checkable
class AgentEnvironment(Protocol):
    """The agent contract: an environment whose episode a loop-owning agent can play in a sandbox.

    After `reset(...)`, `agent_sandbox(channel_dir)` is the episode's sandbox with a channel folder (the caller's,
    or one of the sandbox's own when None), `agent_instruction()` the task as the agent reads it, and
    `finish_episode()` grades what the agent left and returns the reward (the same again when called twice).
    `envkit.sandbox.SandboxEpisode` provides all but `agent_instruction`.
    """

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Any: ...
    def agent_sandbox(self, channel_dir: str | None = None) -> Sandbox: ...
    def agent_instruction(self) -> str: ...
    def finish_episode(self) -> float: ...
    def close(self) -> None: ...


class AgentEpisode:
    """One agent episode: `environment`'s session, a capture session on `proxy` (started) with `max_calls` calls
    sampled with `sampling`, and the agent's run. `close()` ends them (the environment too, unless kept)."""

    def __init__(self, proxy: CaptureProxy, environment: AgentEnvironment, *, max_calls: int,
                 sampling: Sampling) -> None:
        self.proxy, self.environment = proxy, environment
        self.session: CaptureSession = proxy.open_session(max_calls=max_calls, sampling=sampling)
        self._sandbox: Sandbox | None = None
        self._socket: str | None = None

    def start(self, arguments: Mapping[str, Any]) -> Sandbox:
        """Reset the environment with `arguments` and take its sandbox for the agent, the proxy listening on the
        sandbox's channel."""
        self.environment.reset(**arguments)
        sandbox = self._sandbox = self.environment.agent_sandbox()
        if sandbox.channel_dir is None:
            raise TypeError(f"{type(self.environment).__name__}.agent_sandbox() gave a sandbox without a channel "
                            "folder: open it with open_sandbox(channel_dir=...)")
        self._socket = self.proxy.add_listener(os.path.join(sandbox.channel_dir, SOCKET_NAME))
        return sandbox

    def run(self, command: Callable[[str], str], *, timeout_s: float) -> RunResult:
        """Run the agent's command line, `command(instruction)`, in the started episode's sandbox, its task also in
        `$ENVKIT_TASK`; how the command ended."""
        if self._sandbox is None:
            raise RuntimeError("start the episode first: episode.start(reset_arguments)")
        instruction = self.environment.agent_instruction()
        return run_agent(self._sandbox, command(instruction), session=self.session, timeout_s=timeout_s,
                         env={TASK_VARIABLE: instruction})

    def finish(self) -> float | None:
        """The environment's reward for the episode (`finish_episode()`; None: unscorable)."""
        reward = self.environment.finish_episode()
        return None if reward is None else float(reward)

    def close(self, *, keep_sandbox: bool = False) -> None:
        """End the capture session and the proxy's socket, and the environment's session unless `keep_sandbox`."""
        try:
            self.session.close()
            if self._socket is not None:
                self.proxy.remove_listener(self._socket)
                self._socket = None
        finally:
            if not keep_sandbox:
                self.environment.close()
