"""TRL's OpenEnv quick start pattern against an echo server; run with the OpenEnv venv's python.

TRL's `examples/scripts/openenv/echo.py` wraps OpenEnv's classic echo client in an `EchoToolEnv` whose
`reset()` does nothing on the server and whose `echo` tool steps the client, so every step comes before
any reset. OpenEnv's classic echo client sends `{"type": "step", "data": {"message": ...}}`, as OpenEnv's
GenericEnvClient does with a dict action.

    python trl_echo_quickstart.py URL   → one JSON line per tool call: the text and the reward.
"""

import json
import sys

from openenv.core.generic_client import GenericEnvClient


class EchoToolEnv:
    def __init__(self, url: str) -> None:
        self.client = GenericEnvClient(base_url=url).sync()
        self.client.connect()
        self.reward = 0.0

    def reset(self, **kwargs) -> str | None:
        self.reward = 0.0
        return None

    def echo(self, message: str) -> str:
        """Echo the message back.

        Args:
            message: The message to echo.
        """
        observation = self.client.step({"message": message})
        self.reward = observation.reward
        return observation.observation["echoed_message"]


env = EchoToolEnv(sys.argv[1])
env.reset(prompt="Say hello")
for message in ("hello", "a longer message"):
    text = env.echo(message)
    print(json.dumps({"text": text, "reward": env.reward}))
env.client.close()
