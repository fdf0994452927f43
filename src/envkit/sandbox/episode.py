"""What an environment whose episodes run in a sandbox of the session's own shares: `SandboxEpisode`.

    class CodingEnvironment(SandboxEpisode, Environment[CodingAction, CodingObservation, CodingState]):
        ACTION = CodingAction
        def _open(self, channel_dir): ...        # the session's sandbox (with a channel folder for an agent)
        def _move(self, action): ...             # one tool call that is not a submit
        def _grade(self, heading): ...           # sets `_verdict` (its `reward`), returns the last observation

The base keeps the session's sandbox (opened at first use, or for a loop-owning agent with a channel folder), the
episode's task and verdict, the opening of every step (the action's type, a task, an episode not yet graded, submit
grades), a command's output as the model reads it (its time limit and output cut from the sandbox's own limits),
and `close`. With `agent_instruction()` from the subclass it is the agent contract of `envkit.agents`
(`AgentEnvironment`): `agent_sandbox`, `agent_instruction`, `finish_episode`.
"""

from __future__ import annotations

import os
import random
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

from .base import RunResult, Sandbox, clip

__all__ = ["SandboxEpisode", "Verdict"]


class Verdict(Protocol):
    """A graded episode: its reward."""

    @property
    def reward(self) -> float: ...


class SandboxEpisode(ABC):
    """The sandbox, task, steps and agent contract of an environment whose sessions each have a sandbox."""

    #: The class `step` takes (with a `kind`, "submit" among them).
    ACTION: ClassVar[type[Any]]
    #: Characters of a command's output the model reads (the start and the end of longer output).
    SHOWN_CHARS: ClassVar[int] = 4000

    _sandbox: Sandbox | None = None
    #: The sandbox `agent_sandbox` handed to an agent this episode.
    _agents: Sandbox | None = None
    _task: Any = None
    _verdict: Verdict | None = None
    _episode_id: str | None = None
    _calls = 0
    _timeouts = 0

    # -- what a subclass provides

    @abstractmethod
    def _open(self, channel_dir: str | bool | None) -> Sandbox:
        """A started sandbox for the episode's task: with `channel_dir` (for an agent) when it is not None."""

    @abstractmethod
    def _move(self, action: Any) -> Any:
        """One tool call that is not a submit: its observation."""

    @abstractmethod
    def _grade(self, heading: str) -> Any:
        """Grade the episode (set `_verdict`) and return its last observation, its text opening with `heading`."""

    # -- the episode

    @staticmethod
    def _drawn(seed: int | None, task_ids: Sequence[str]) -> str:
        """The task id `seed` draws from `task_ids` (the same seed, the same task)."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed={seed!r} is not a whole number; give an int or leave it out")
        return random.Random(seed).choice(list(task_ids))

    def _begin(self, task: Any, episode_id: str | None) -> None:
        """A new episode of `task`: the last one's sandbox closed, the counts at zero."""
        self._close_sandbox()
        self._task, self._verdict = task, None
        self._episode_id = episode_id or uuid.uuid4().hex
        self._calls = self._timeouts = 0

    def step(self, action: Any) -> Any:
        """Make one move; a submit grades the episode and ends it."""
        name = self.ACTION.__name__
        if not isinstance(action, self.ACTION):
            raise TypeError(f"step() takes a {name}, e.g. {name}(kind='submit'); got {type(action).__name__}")
        self._require_task()
        if self._verdict is not None:
            raise ValueError("the episode is over (it was graded); call reset() to start another")
        self._calls += 1
        if action.kind == "submit":
            return self._grade("Submitted.")
        return self._move(action)

    def close(self) -> None:
        """End the session's sandbox and everything running in it."""
        self._close_sandbox()

    def _require_task(self) -> Any:
        if self._task is None:
            raise ValueError("no task yet: call reset() first, with a task_id from the splits (or a seed)")
        return self._task

    def _session_sandbox(self) -> Sandbox:
        """The episode's sandbox, opened now if it is not yet."""
        self._require_task()
        if self._sandbox is None:
            self._sandbox = self._open(None)
        return self._sandbox

    def _close_sandbox(self) -> None:
        sandbox, self._sandbox, self._agents = self._sandbox, None, None
        if sandbox is not None:
            sandbox.close()

    def _shown(self, result: RunResult, timeout_s: float | None = None) -> str:
        """A command's output as the model reads it, and how it ended; a timeout is counted."""
        limits = self._session_sandbox().limits
        self._timeouts += result.timed_out
        text = "\n".join(part for part in (clip(result.stdout, self.SHOWN_CHARS), clip(result.stderr, self.SHOWN_CHARS))
                         if part)
        if result.timed_out:
            ending = f"stopped after {timeout_s or limits.wall_s:g} s (the time limit of a command)"
        else:
            ending = f"exit code {result.exit_code}"
        if result.truncated:
            ending += f"; output cut at {limits.output_bytes} bytes"
        return f"{text}\n[{ending}]" if text else f"[no output; {ending}]"

    # -- the agent contract (`envkit.agents.AgentEnvironment`)

    def agent_sandbox(self, channel_dir: str | None = None) -> Sandbox:
        """The episode's sandbox for a loop-owning agent, with a channel folder at /run/envkit where the agent's
        model server listens (`<channel_dir>/proxy.sock`): `channel_dir` when given (it stays the caller's), else a
        folder of the session's own, removed with the sandbox. Called right after reset: the sandbox reset opened
        is the agent's when it has a channel folder of its own and none other is asked for, else a fresh one
        replaces it; the session's tool calls run in the same sandbox."""
        sandbox = self._sandbox
        if sandbox is not None and sandbox is self._agents:
            if channel_dir is not None and sandbox.channel_dir != os.path.realpath(channel_dir):
                raise ValueError(f"this episode's sandbox already has the channel folder {sandbox.channel_dir}; "
                                 "call agent_sandbox() again without channel_dir, or reset() first")
            return sandbox
        self._require_task()
        if self._calls:
            raise ValueError("this episode's sandbox has run tool calls, without a channel for an agent: call "
                             "agent_sandbox() right after reset()")
        if sandbox is None or not sandbox.owns_channel or channel_dir is not None:
            sandbox = self._open(channel_dir or True)
            self._close_sandbox()
            self._sandbox = sandbox
        self._agents = sandbox
        return sandbox

    def finish_episode(self) -> float:
        """Grade the episode now (once), end it, and return its reward; again after that, the same reward."""
        if self._verdict is None:
            self._grade("Finished.")
        assert self._verdict is not None
        return self._verdict.reward
