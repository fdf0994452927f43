"""Small environments that exercise the server's edge cases (slow, failing, single-session, closing)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from pydantic import Field

from envkit import Action, Environment, Observation, State, tool


class CounterAction(Action):
    """Add `amount` to the counter; `fail` makes the step raise; `sleep_s` makes it slow."""

    amount: int = 1
    fail: bool = False
    sleep_s: float = Field(default=0.0, ge=0, le=30)


class CounterObservation(Observation):
    total: int = 0
    tag: str = ""


class CounterEnvironment(Environment[CounterAction, CounterObservation, State]):
    """A counter per session; synchronous, so the server runs it on worker threads."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    instances = 0

    def __init__(self) -> None:
        type(self).instances += 1
        self.total = 0
        self.tag = ""
        self._state = State()

    def reset(self, seed: int | None = None, episode_id: str | None = None, tag: str = "", **kwargs: Any) -> CounterObservation:
        self.total, self.tag = 0, tag
        self._state = State(episode_id=episode_id, step_count=0)
        return CounterObservation(total=0, tag=tag, reward=0.0)

    def step(self, action: CounterAction) -> CounterObservation:
        if action.sleep_s:
            time.sleep(action.sleep_s)
        if action.fail:
            raise RuntimeError("the counter was asked to fail")
        self.total += action.amount
        self._state.step_count += 1
        return CounterObservation(total=self.total, tag=self.tag, reward=float(action.amount), done=self.total >= 100)

    @property
    def state(self) -> State:
        return State(episode_id=self._state.episode_id, step_count=self._state.step_count, total=self.total, tag=self.tag)

    @tool
    def add(self, amount: int) -> CounterObservation:
        """Add to the counter.

        Args:
            amount: How much to add.
        """
        return self.step(CounterAction(amount=amount))

    @tool
    def peek(self) -> str:
        """Say the counter's value without changing it."""
        return f"total is {self.total}"

    def close(self) -> None:
        marker = os.environ.get("ENVKIT_TEST_CLOSE_MARKER")
        if marker:
            with open(marker, "a") as handle:
                handle.write("closed\n")


class RecordingEnvironment(CounterEnvironment):
    """Answered on the event loop; writes every reset, step and close of every session into one shared list."""

    RUN_INLINE = True
    calls: list[str] = []

    def reset(self, seed: int | None = None, episode_id: str | None = None, tag: str = "", **kwargs: Any) -> CounterObservation:
        self.calls.append("reset")
        return super().reset(seed=seed, episode_id=episode_id, tag=tag)

    def step(self, action: CounterAction) -> CounterObservation:
        self.calls.append("step")
        return super().step(action)

    def close(self) -> None:
        self.calls.append("close")


class SingleSessionEnvironment(CounterEnvironment):
    """Like the counter, but declares that instances may not run side by side."""

    SUPPORTS_CONCURRENT_SESSIONS = False


class SlowCloseEnvironment(SingleSessionEnvironment):
    """A one-session environment whose close() takes a while, like a simulator process shutting down."""

    CLOSE_S = 0.3

    def close(self) -> None:
        time.sleep(self.CLOSE_S)


class SlowClosingCounterEnvironment(CounterEnvironment):
    """A counter (any number of sessions) whose close() takes 20 ms on a worker thread."""

    def close(self) -> None:
        time.sleep(0.02)


class StuckCloseEnvironment(CounterEnvironment):
    """close() waits until the test sets `release`, like a simulator that hangs while shutting down."""

    release = threading.Event()

    def close(self) -> None:
        self.release.wait(30)


class StrictResetEnvironment(CounterEnvironment):
    """Its reset() names every argument it takes (no **kwargs)."""

    def reset(self, seed: int | None = None, episode_id: str | None = None,  # type: ignore[override]
              tag: str = "") -> CounterObservation:
        return super().reset(seed=seed, episode_id=episode_id, tag=tag)


class BrokenFactoryEnvironment(CounterEnvironment):
    """Its constructor always fails."""

    def __init__(self) -> None:
        raise OSError("the simulator binary is missing")


class BadObservationEnvironment(CounterEnvironment):
    """Returns something that is not an Observation from step."""

    def step(self, action: CounterAction) -> Any:  # type: ignore[override]
        return {"total": 1}


class ClashingNamesEnvironment(CounterEnvironment):
    """Arguments named like the server's own internals (`function`, `self`) and like pydantic's (`model_config`)."""

    RUN_INLINE = False   # on a worker thread: through `Session.run(function, ...)`

    def reset(self, seed: int | None = None, episode_id: str | None = None, function: str = "",
              **kwargs: Any) -> CounterObservation:
        observation = super().reset(seed, episode_id, tag=f"function={function} extra={sorted(kwargs)}")
        return observation

    @tool
    def call_function(self, function: str) -> str:
        """Call a function by name.

        Args:
            function: The function's name.
        """
        return f"called {function}"

    @tool
    def configure(self, model_config: str, _private: int = 0, json: bool = False) -> str:
        """Set options whose names a pydantic model reserves.

        Args:
            model_config: A configuration name.
            _private: A number.
            json: A flag.
        """
        return f"model_config={model_config} _private={_private} json={json}"


class PidCounterEnvironment(CounterEnvironment):
    """A counter that also tells which process serves it (for servers of several processes)."""

    @tool
    def whoami(self) -> str:
        """Say the id of the process this session lives in."""
        return str(os.getpid())


class ServiceCounterEnvironment(CounterEnvironment):
    """A counter with a service tool, for the program driving it: not listed for agents, callable without a reset."""

    @tool(service=True)
    def describe(self, verbose: bool = False) -> dict[str, Any]:
        """Say what the counter holds, for the program driving it.

        Args:
            verbose: Say the tag too.
        """
        return {"total": self.total, **({"tag": self.tag} if verbose else {})}
