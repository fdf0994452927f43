"""Against an envkit server that requires an API key: the SDK plays with `OPENREWARD_API_KEY` set, and is refused
without it.

Usage: sdk_api_key.py URL ENV_NAME   (run in the openreward venv); prints one JSON object.
"""

from __future__ import annotations

import json
import os
import sys

from openreward import OpenReward
from openreward.api.environments import AuthenticationError

url, name = sys.argv[1], sys.argv[2]
report: dict = {"key_given": bool(os.environ.get("OPENREWARD_API_KEY"))}
try:
    env = OpenReward(base_url=url).environments.get(name)
    report["splits"] = env.list_splits()
    with env.session(split="train", index=0) as session:
        report["prompt"] = bool(session.get_prompt())
except AuthenticationError:   # the SDK's own error for an HTTP 401
    report["refused"] = 401
print(json.dumps(report))
