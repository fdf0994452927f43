"""An echo environment served by OpenEnv 0.10.0's own server; run with the OpenEnv venv's python.

    python echo_server.py [MAX_CONCURRENT_ENVS]   → prints "port N", serves on 127.0.0.1 until killed.
"""

import socket
import sys
from typing import Any, Optional

import uvicorn
from openenv.core.env_server import Action, Environment, Observation, State, create_app


class EchoAction(Action):
    message: str


class EchoObservation(Observation):
    echoed_message: str = ""
    message_length: int = 0


class EchoEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        self._state = State(step_count=0)

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any) -> EchoObservation:
        self._state = State(episode_id=episode_id, step_count=0)
        return EchoObservation(echoed_message="Echo environment ready!", reward=0.0)

    def step(self, action: EchoAction, timeout_s: Optional[float] = None, **kwargs: Any) -> EchoObservation:
        self._state.step_count += 1
        return EchoObservation(echoed_message=action.message, message_length=len(action.message),
                               reward=0.1 * len(action.message))

    @property
    def state(self) -> State:
        return self._state


if __name__ == "__main__":
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    app = create_app(EchoEnvironment, EchoAction, EchoObservation, max_concurrent_envs=limit)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print("port", sock.getsockname()[1], flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
