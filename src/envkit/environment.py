"""The environment contract: typed actions, observations and state, and the `Environment` base class.

An environment author subclasses `Action`, `Observation` (and optionally `State`) and
`Environment`, implements `reset`, `step` and `state`, and marks the methods an LLM agent may
call with `@tool`. The same class is then served by `create_app`, driven by `EnvClient`, and
bound to a trainer, without any per-consumer glue.
"""

from __future__ import annotations

import inspect
import json
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, Sequence, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from .episode_metrics import Metric

__all__ = ["Action", "Observation", "State", "Environment", "UnknownSplitError", "opening_text"]


class Action(BaseModel):
    """Base class of an environment's action. Unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, arbitrary_types_allowed=True)

    metadata: dict[str, Any] = Field(default_factory=dict, description="Free-form data sent with the action")


class Observation(BaseModel):
    """Base class of what an environment returns from `reset` and `step`.

    `reward` and `done` travel beside the observation on the wire (OpenEnv's format); the
    remaining fields form the observation itself.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, arbitrary_types_allowed=True)

    done: bool = Field(default=False, description="Whether the episode has ended")
    reward: float | None = Field(default=None, description="Reward for the last action")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Free-form data about the observation")

    def as_text(self) -> str:
        """The observation as a language model should read it; override for a friendlier rendering."""
        fields = self.model_dump(exclude={"done", "reward", "metadata"})
        if len(fields) == 1:
            (value,) = fields.values()
            return value if isinstance(value, str) else json.dumps(value)
        return json.dumps(fields)


class State(BaseModel):
    """Base class of an environment's inspectable state. Extra fields are allowed."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, arbitrary_types_allowed=True)

    episode_id: str | None = Field(default=None, description="Identifier of the current episode")
    step_count: int = Field(default=0, ge=0, description="Steps taken in the current episode")


class UnknownSplitError(KeyError):
    """A split or task index the environment does not have."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def opening_text(prompt: str | None, observation: str) -> str:
    """What a model reads first in an episode: the task's prompt, a blank line, then the first observation's text.

    The prompt is left out where the observation already holds it, so nothing is said twice; the observation's text
    is kept as it is (a chat template reads its whitespace too).
    """
    prompt = (prompt or "").strip()
    if not prompt or prompt in observation:
        return observation
    return f"{prompt}\n\n{observation}" if observation.strip() else prompt


#: The methods servers call on the class, before or without an instance: an author may write them as plain
#: methods, classmethods or staticmethods (`Environment.__init_subclass__` makes a plain one a classmethod).
_CLASS_LEVEL = ("task_prompt", "task_instruction")

ActionT = TypeVar("ActionT", bound=Action)
ObservationT = TypeVar("ObservationT", bound=Observation)
StateT = TypeVar("StateT", bound=State)


class Environment(ABC, Generic[ActionT, ObservationT, StateT]):
    """One episode-holding environment instance; the server builds one per connection.

    Class attributes:
        SUPPORTS_CONCURRENT_SESSIONS: instances share nothing, so many may live in one process.
            `create_app(max_concurrent_envs > 1)` refuses an environment that does not say so.
        RUN_INLINE: `reset`, `step` and tools are quick and never block, so the server calls them
            on the event loop instead of handing them to a worker thread.
        ALLOWS_STEP_BEFORE_RESET: stepping (or calling a tool of) a never-reset instance is a
            meaningful move, as in echo. Off by default: then such a step gets `NOT_RESET`, which is
            what tells a client that silently reconnected to a fresh session that its game is gone.
        EPISODE_LENGTH: how many tool calls an episode takes when played to its end (Catch: 9 moves;
            Wordle: at most 6 guesses); None when episodes have no set length. Published in
            `/metadata` as `episode_length`; `envkit train` fits its turn and token budgets to it.
        REWARD_RANGE: the lowest and highest reward one episode can sum to (Catch: -1 to 1), or None.
            Published in `/metadata` as `reward_range`; `envkit train` scores an episode the model
            abandoned before the environment ended it with the lowest, so quitting never beats losing.
        TRAIN_REWARDS: the rewards `envkit train` trains on when the user names none (`--reward`
            specs: `env`, a component the environment reports, each with an optional `=WEIGHT`); empty
            means the environment's own reward. Published in `/metadata` as `train_rewards`. Wordle trains
            on `played`, its reward with a game ended by invalid guesses scored 0, as an unfinished one is.

    Subclasses may define `reset_async` / `step_async` coroutines instead of (or beside) the
    synchronous methods; the server then awaits them directly.
    """

    SUPPORTS_CONCURRENT_SESSIONS: ClassVar[bool] = False
    RUN_INLINE: ClassVar[bool] = False
    ALLOWS_STEP_BEFORE_RESET: ClassVar[bool] = False
    #: Named lists of tasks (`{"train": [...], "test": [...]}`); each task is the keyword arguments `reset`
    #: takes for one episode. Tasks are shown to clients and become dataset columns, so they must never hold
    #: an answer (name it by index instead). Override `tasks()` to build them on demand.
    TASKS: ClassVar[dict[str, Sequence[dict[str, Any]]]] = {}
    EPISODE_LENGTH: ClassVar[int | None] = None
    REWARD_RANGE: ClassVar[tuple[float, float] | None] = None
    TRAIN_REWARDS: ClassVar[Sequence[str]] = ()
    #: The episode metrics an evaluation table shows for this environment (`envkit.episode_metrics.Metric`); their
    #: values come from `episode_metrics()`.
    METRICS: ClassVar[Sequence[Metric]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Make a `task_prompt` or `task_instruction` written as a plain method callable on the class, as servers
        call it (no instance exists before a session opens): its `self` is then the class."""
        super().__init_subclass__(**kwargs)
        for name in _CLASS_LEVEL:
            written = cls.__dict__.get(name)
            if inspect.isfunction(written):
                setattr(cls, name, classmethod(written))

    @classmethod
    def splits(cls) -> list[str]:
        """The names of the environment's task splits (e.g. `["train", "test"]`); empty when it has none."""
        return list(cls.TASKS)

    @classmethod
    def tasks(cls, split: str) -> Sequence[dict[str, Any]]:
        """The tasks of `split`, each the `reset` keyword arguments of one episode.

        Raises:
            UnknownSplitError: the environment has no split of that name.
        """
        if split not in cls.TASKS:
            known = ", ".join(cls.splits()) or "none"
            raise UnknownSplitError(f"{cls.__name__} has no split {split!r}; its splits: {known}")
        return cls.TASKS[split]

    @classmethod
    def task(cls, split: str, index: int) -> dict[str, Any]:
        """Task number `index` of `split` (a copy).

        Raises:
            UnknownSplitError: no such split, or `index` is out of range.
        """
        tasks = cls.tasks(split)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(tasks):
            raise UnknownSplitError(f"{cls.__name__} split {split!r} has tasks 0 to {len(tasks) - 1}; got index {index!r}")
        return dict(tasks[index])

    @classmethod
    def task_prompt(cls, task: dict[str, Any]) -> str | None:
        """The instruction a model starts an episode of `task` from; None: the first observation's text is enough.

        The model reads it before the first observation's text (`opening_text`), or the observation alone where
        that already holds it.
        """
        return None

    @classmethod
    def task_instruction(cls, task: dict[str, Any]) -> str:
        """What `task` asks, as a catalogue lists it without starting an episode (the Harbor Task API's
        `instruction`): `task_prompt(task)`, or "" when the instruction only comes with the first observation.

        Override it where the instruction is known before reset but is not a prompt of its own (a Harbor task's
        `instruction.md`, which is also its first observation). Quick and side-effect free: servers call it per
        listed task.
        """
        return cls.task_prompt(task) or ""

    def episode_metrics(self) -> dict[str, float]:
        """The current episode's value of every metric in `METRICS` (quick, no I/O: servers call it after each move).

        Booleans count as 1 and 0. The default reports nothing.
        """
        return {}

    @abstractmethod
    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ObservationT:
        """Start a new episode and return its first observation."""

    @abstractmethod
    def step(self, action: ActionT) -> ObservationT:
        """Apply one action and return the resulting observation."""

    @property
    @abstractmethod
    def state(self) -> StateT:
        """The current state of the episode."""

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ObservationT:
        """Asynchronous `reset`; by default calls the synchronous one."""
        return self.reset(seed=seed, episode_id=episode_id, **kwargs)

    async def step_async(self, action: ActionT) -> ObservationT:
        """Asynchronous `step`; by default calls the synchronous one."""
        return self.step(action)

    def close(self) -> None:
        """Release what the environment holds; called once when its session ends."""
