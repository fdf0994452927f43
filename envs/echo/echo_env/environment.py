"""The echo environment: every step echoes its message; the reward is 0.1 per character; it never ends.

As in OpenEnv's echo, a step needs no reset first, and besides `echo` it offers OpenEnv's current echo
tools `echo_message` and `echo_with_length`, which return the same values (and earn no reward).
"""

from __future__ import annotations

import uuid
from typing import Any

from envkit import Environment, Metric, State, tool

from .models import EchoAction, EchoObservation

REWARD_PER_CHARACTER = 0.1
_TRAIN_MESSAGES = ("hello", "good morning", "the quick brown fox", "envkit", "reinforcement learning",
                   "echo this back", "a longer message earns more reward", "ping")
_TEST_MESSAGES = ("hello world", "testing, one two three", "stateful environments", "goodbye")


class EchoEnvironment(Environment[EchoAction, EchoObservation, State]):
    """Echoes each message back, rewarding 0.1 per character. Episodes never end by themselves."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUN_INLINE = True
    ALLOWS_STEP_BEFORE_RESET = True   # OpenEnv's echo answers a step without a reset (TRL's quick start relies on it)
    #: A few messages to echo; a task's message shapes the prompt, and `reset(message=...)` remembers it for `echoed`.
    TASKS = {"train": tuple({"message": m} for m in _TRAIN_MESSAGES), "test": tuple({"message": m} for m in _TEST_MESSAGES)}
    METRICS = (
        Metric("echoed", "echoed the task's message", "count", success=True,
               description="one echo repeated the task's message exactly"),
        Metric("characters", "characters echoed", "mean", description="characters echoed over the episode"),
    )

    @classmethod
    def task_prompt(cls, task: dict[str, Any]) -> str | None:
        """Ask for the task's message to be echoed."""
        message = task.get("message")
        return f"Echo this message back with the echo tool: {message}" if message else None

    def __init__(self) -> None:
        # Plain attributes, not a State model: a model validates every assignment, and a step must stay cheap.
        self._episode_id: str | None = None
        self._step_count = 0
        self._target: str | None = None
        # What the episode's metrics need, not every message: an episode never ends, so its memory must not grow.
        self._echoed_target = False
        self._characters = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> EchoObservation:
        self._episode_id = episode_id or uuid.uuid4().hex
        self._step_count = 0
        message = kwargs.get("message")
        self._target = message if isinstance(message, str) else None
        self._echoed_target = False
        self._characters = 0
        return EchoObservation(echoed_message="Echo environment ready!", message_length=0, reward=0.0)

    def step(self, action: EchoAction) -> EchoObservation:
        return self._echo(action.message)

    def _echo(self, message: str) -> EchoObservation:
        self._step_count += 1
        self._characters += len(message)
        if message == self._target:
            self._echoed_target = True
        return EchoObservation(echoed_message=message, message_length=len(message),
                               reward=len(message) * REWARD_PER_CHARACTER,
                               metadata={"original_message": message, "step": self._step_count})

    @property
    def state(self) -> State:
        return State(episode_id=self._episode_id, step_count=self._step_count)

    def episode_metrics(self) -> dict[str, float]:
        """Whether an echo repeated the task's message, and how many characters were echoed."""
        return {"echoed": int(self._echoed_target), "characters": self._characters}

    @tool
    def echo(self, message: str) -> EchoObservation:
        """Echo a message back; longer messages earn more reward.

        Args:
            message: The message to echo.
        """
        return self._echo(message)   # the same as a step; the message was validated as the tool's argument

    @tool
    def echo_message(self, message: str) -> str:
        """Echo back the provided message.

        Args:
            message: The message to echo back

        Returns:
            The same message that was provided
        """
        return message

    @tool
    def echo_with_length(self, message: str) -> dict[str, Any]:
        """Echo back the message with its length.

        Args:
            message: The message to echo back

        Returns:
            Dictionary with the message and its length
        """
        return {"message": message, "length": len(message)}
