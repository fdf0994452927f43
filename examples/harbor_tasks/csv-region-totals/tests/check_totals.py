"""Scores /app/totals.csv in parts and writes them to /logs/verifier/reward.json.

format_ok: the file exists, starts with the header `region,total`, and every other line is `name,N.NN`.
values_ok: the regions and their totals are the right ones, in order.
reward: the mean of the two.
"""

import json
import re
from pathlib import Path

EXPECTED = [("east", "15.50"), ("north", "150.75"), ("south", "100.00"), ("west", "100.00")]

path = Path("/app/totals.csv")
lines = path.read_text().splitlines() if path.is_file() else []
rows = [tuple(line.split(",")) for line in lines[1:]]
format_ok = int(bool(lines) and lines[0] == "region,total" and bool(rows)
                and all(re.fullmatch(r"[a-z]+,-?\d+\.\d\d", line) for line in lines[1:]))
values_ok = int(rows == EXPECTED)
result = {"reward": (format_ok + values_ok) / 2, "format_ok": format_ok, "values_ok": values_ok}
Path("/logs/verifier/reward.json").write_text(json.dumps(result))
print(result)
