#!/bin/bash
set -euo pipefail
python3 - <<'PY'
import json
from pathlib import Path

path = Path("/app/package.json")
data = json.loads(path.read_text())
data["version"] = "1.3.0"
data["dependencies"]["left-pad"] = "^1.3.0"
del data["devDependencies"]
path.write_text(json.dumps(data, indent=2) + "\n")
PY
