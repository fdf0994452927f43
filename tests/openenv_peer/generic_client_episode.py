"""Play an echo episode with OpenEnv 0.10.0's own client; run with the OpenEnv venv's python.

    python generic_client_episode.py URL   → prints one JSON line per call.
"""

import json
import sys

from openenv.core.generic_client import GenericEnvClient

with GenericEnvClient(base_url=sys.argv[1]).sync() as env:
    for result in (env.reset(), env.step({"message": "hello"}), env.step({"message": "envkit"})):
        print(json.dumps({"observation": result.observation, "reward": result.reward, "done": result.done}))
    print(json.dumps({"state": env.state()}))
    try:
        env.step({"wrong": 1})
    except Exception as error:   # OpenEnv reports server errors as RuntimeError
        print(json.dumps({"error": str(error)}))
    print(json.dumps({"after_error": env.step({"message": "still here"}).observation}))
