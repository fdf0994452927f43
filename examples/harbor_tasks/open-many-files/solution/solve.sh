#!/bin/bash
# Needs what harbor gives every process of the task's container: the engine's open-file limit (over 1,024), an
# address space bounded only by the container's memory cgroup, and /logs/agent from the start.
set -euo pipefail
echo "opening 1100 files" > /logs/agent/progress.log
python3 - <<'PYTHON'
import mmap

held = [open(f"/tmp/held-{number}", "w") for number in range(1100)]
reserved = mmap.mmap(-1, 1024 << 20)   # address space only: no page of it is touched
with open("/app/held.txt", "w") as out:
    out.write(f"{len(held)} {len(reserved) >> 20}\n")
PYTHON
echo "held 1100 files and 1024 MB of address space" >> /logs/agent/progress.log
