"""Play seeded episodes with OpenEnv 0.10's own client; run with the OpenEnv venv's python.

    python play_seeded.py URL ACTIONS_JSON SEED...   → one JSON line per reset and step

Each episode resets with its seed and then steps the actions in order until one ends it. ACTIONS_JSON may
instead be `{"legal": FIELD}`: up to 30 steps, each taking the last of the observation's `legal_actions` as FIELD.
"""

import json
import sys

from openenv.core.generic_client import GenericEnvClient

url, actions, seeds = sys.argv[1], json.loads(sys.argv[2]), [int(seed) for seed in sys.argv[3:]]
with GenericEnvClient(base_url=url).sync() as env:
    for seed in seeds:
        result = env.reset(seed=seed)
        print(json.dumps({"seed": seed, "observation": result.observation, "reward": result.reward,
                          "done": result.done}))
        moves = actions if isinstance(actions, list) else [None] * 30
        for action in moves:
            if result.done:
                break
            result = env.step(action or {actions["legal"]: result.observation["legal_actions"][-1]})
            print(json.dumps({"observation": result.observation, "reward": result.reward, "done": result.done}))
