"""At capacity (a server of one slot): the SDK's second session is refused with 503 after retries; the first plays on.

Usage: sdk_capacity.py URL   (run in the openreward venv); prints one JSON object.
"""

from __future__ import annotations

import json
import sys

import aiohttp
from openreward import OpenReward

report: dict = {}
env = OpenReward(base_url=sys.argv[1]).environments.get("wordle")
with env.session(split="train", index=0) as first:
    try:
        with env.session(split="train", index=1):
            report["refused"] = None
    except aiohttp.ClientResponseError as error:
        report["refused"] = {"status": error.status, "detail": error.message}
    report["first_still_plays"] = "Feedback:" in first.call_tool("guess", {"guess": "[crane]"}).blocks[0].text
with env.session(split="train", index=1) as second:
    report["after_delete"] = "opened" if second.get_prompt() else "no prompt"
print(json.dumps(report))
