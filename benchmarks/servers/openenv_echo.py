"""Baseline (b): the echo environment served by OpenEnv 0.10.0's own `create_app` (run in its own venv).

The models and the environment mirror envkit's bundled echo field for field; everything else is
OpenEnv's server as installed from PyPI, started the way its generated apps start (`uvicorn.run`).

    benchmarks/.venv-openenv/bin/python benchmarks/servers/openenv_echo.py --port 8002

The same class, unchanged, is what envkit serves in the side-by-side's `envkit-openenv` row
(`envkit serve ./openenv_echo.py:EchoEnvironment`, from a venv holding openenv).
"""

from __future__ import annotations

import argparse
import uuid
from typing import Any, Optional

import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

REWARD_PER_CHARACTER = 0.1


class EchoAction(Action):
    message: str = Field(description="The message to echo")


class EchoObservation(Observation):
    echoed_message: str = Field(default="", description="The message, echoed back")
    message_length: int = Field(default=0, description="Length of the echoed message")


class EchoEnvironment(Environment[EchoAction, EchoObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        self._state = State(episode_id=uuid.uuid4().hex, step_count=0)

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any) -> EchoObservation:
        self._state = State(episode_id=episode_id or uuid.uuid4().hex, step_count=0)
        return EchoObservation(echoed_message="Echo environment ready!", message_length=0, reward=0.0)

    def step(self, action: EchoAction) -> EchoObservation:  # type: ignore[override]
        self._state.step_count += 1
        message = action.message
        return EchoObservation(echoed_message=message, message_length=len(message),
                               reward=len(message) * REWARD_PER_CHARACTER,
                               metadata={"original_message": message, "step": self._state.step_count})

    @property
    def state(self) -> State:
        return self._state


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-concurrent-envs", type=int, default=20000)
    arguments = parser.parse_args()
    app = create_app(EchoEnvironment, EchoAction, EchoObservation, env_name="echo",
                     max_concurrent_envs=arguments.max_concurrent_envs)
    uvicorn.run(app, host="127.0.0.1", port=arguments.port, log_level="warning")
