"""Scores /app/top_words.json in parts with plain asserts; writes /logs/verifier/reward.json.

valid_json: the file is a JSON object of five word -> integer entries; counts_ok: it is the right top five.
reward: 1 only when both hold.
"""

import json
from pathlib import Path

EXPECTED = {"the": 10, "cat": 4, "a": 3, "bird": 3, "dog": 3}


def read() -> dict:
    data = json.loads(Path("/app/top_words.json").read_text())
    assert isinstance(data, dict) and len(data) == 5, "not an object of five entries"
    assert all(isinstance(k, str) and type(v) is int for k, v in data.items()), "not word -> integer"
    return data


try:
    data = read()
    valid_json = 1
except (OSError, ValueError, AssertionError) as error:
    print("invalid:", error)
    data, valid_json = {}, 0
counts_ok = int(data == EXPECTED)
result = {"reward": float(valid_json and counts_ok), "valid_json": valid_json, "counts_ok": counts_ok}
Path("/logs/verifier/reward.json").write_text(json.dumps(result))
print(result)
