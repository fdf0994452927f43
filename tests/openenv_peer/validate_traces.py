"""Validate each line of a traces.jsonl with OpenEnv 0.10.0's own `TrainingTrace`; run with the OpenEnv venv's python.

    python validate_traces.py PATH   → one JSON line per trace: {"line", "ok", "turns", "error"}.
"""

import json
import sys

from openenv.core.harness.training import TrainingTrace

with open(sys.argv[1], encoding="utf-8") as lines:
    for number, line in enumerate(lines, start=1):
        try:
            trace = TrainingTrace.model_validate_json(line)
        except ValueError as error:   # pydantic's ValidationError is a ValueError
            print(json.dumps({"line": number, "ok": False, "turns": None, "error": " ".join(str(error).split())}))
            continue
        print(json.dumps({"line": number, "ok": True, "turns": len(trace.turns), "error": None,
                          "trainable": [sum(turn.loss_mask) for turn in trace.turns]}))
