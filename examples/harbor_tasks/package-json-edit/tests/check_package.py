"""Scores the edit of /app/package.json in parts; writes /logs/verifier/reward.json.

version_ok, deps_ok, dev_removed: one per requested change, each 0 unless the other fields are kept as they were;
reward: their mean (0 when the file is not valid JSON).
"""

import json
from pathlib import Path

KEPT = {"name": "tiny-web", "description": "A tiny web app", "license": "MIT",
        "scripts": {"start": "node server.js", "test": "node --test"}}

try:
    data = json.loads(Path("/app/package.json").read_text())
except (OSError, ValueError):
    data = None
parts = {"version_ok": 0, "deps_ok": 0, "dev_removed": 0}
if isinstance(data, dict) and all(data.get(key) == value for key, value in KEPT.items()):
    parts["version_ok"] = int(data.get("version") == "1.3.0")
    parts["deps_ok"] = int(data.get("dependencies") == {"express": "^4.19.2", "left-pad": "^1.3.0"})
    parts["dev_removed"] = int("devDependencies" not in data)
result = {"reward": round(sum(parts.values()) / len(parts), 4), **parts}
Path("/logs/verifier/reward.json").write_text(json.dumps(result))
print(result)
