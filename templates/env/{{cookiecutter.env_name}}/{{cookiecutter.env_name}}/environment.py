"""{{cookiecutter.title}}: find a secret number between 1 and 100 in at most 7 guesses.

Each guess is answered with "higher" or "lower". Finding the secret earns reward 1 and ends the
episode; running out of guesses ends it with reward 0. `reset(seed=...)` makes the secret
reproducible. Replace the rules with your own: keep `reset`, `step`, `state`, and mark the
methods an agent may call with `@tool` (type hints and a docstring entry for every argument).
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from envkit import Environment, tool

from .models import HIGH, LOW, {{cookiecutter.class_prefix}}Action, {{cookiecutter.class_prefix}}Observation, {{cookiecutter.class_prefix}}State

MAX_GUESSES = 7


class {{cookiecutter.class_prefix}}Environment(Environment[{{cookiecutter.class_prefix}}Action, {{cookiecutter.class_prefix}}Observation, {{cookiecutter.class_prefix}}State]):
    """Guess a secret number between 1 and 100 in at most 7 guesses; each answer says higher or lower."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # instances share nothing, so one server may hold many sessions
    RUN_INLINE = True  # reset, step and the tool are quick and never block
    EPISODE_LENGTH = MAX_GUESSES  # tool calls in a game played to its end: `envkit train` fits its budgets to it
    REWARD_RANGE = (0.0, 1.0)  # what one episode can score; an abandoned episode counts as the lowest
    #: Each task is the keyword arguments of one `reset`: `envkit train` trains on the train split,
    #: `envkit eval` plays the test split, and Open Reward Standard clients list both.
    TASKS = {"train": tuple({"seed": seed} for seed in range(100)),
             "test": tuple({"seed": seed} for seed in range(1000, 1030))}

    def __init__(self) -> None:
        self._secret = 0
        self._state = {{cookiecutter.class_prefix}}State()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> {{cookiecutter.class_prefix}}Observation:
        """Start a new game.

        Args:
            seed: Seeds the secret: the same seed gives the same secret.
            episode_id: A name for the episode; a random one when absent.
        """
        self._secret = random.Random(seed).randint(LOW, HIGH)
        self._state = {{cookiecutter.class_prefix}}State(episode_id=episode_id or uuid.uuid4().hex, guesses_left=MAX_GUESSES)
        return {{cookiecutter.class_prefix}}Observation(
            message=f"Guess a number between {LOW} and {HIGH}. You have {MAX_GUESSES} guesses.",
            guesses_left=MAX_GUESSES, reward=0.0)

    def step(self, action: {{cookiecutter.class_prefix}}Action) -> {{cookiecutter.class_prefix}}Observation:
        if self._state.won or self._state.guesses_left == 0:
            raise ValueError("the episode is over; call reset() to start a new one")
        self._state.step_count += 1
        self._state.guesses_left -= 1
        left = self._state.guesses_left
        if action.guess == self._secret:
            self._state.won = True
            return {{cookiecutter.class_prefix}}Observation(
                message=f"Correct! The number was {self._secret}.", guesses_left=left, reward=1.0, done=True)
        hint = "higher" if action.guess < self._secret else "lower"
        if left == 0:
            return {{cookiecutter.class_prefix}}Observation(
                message=f"{action.guess} is wrong and no guesses are left; the number was {self._secret}.",
                guesses_left=0, reward=0.0, done=True)
        return {{cookiecutter.class_prefix}}Observation(
            message=f"{action.guess} is wrong; the number is {hint}. {left} guesses left.",
            guesses_left=left, reward=0.0)

    @property
    def state(self) -> {{cookiecutter.class_prefix}}State:
        return self._state

    @tool
    def guess(self, number: int) -> {{cookiecutter.class_prefix}}Observation:
        """Guess the secret number; the answer says whether it is higher or lower.

        Args:
            number: The guess, a whole number between 1 and 100.
        """
        return self.step({{cookiecutter.class_prefix}}Action(guess=number))
