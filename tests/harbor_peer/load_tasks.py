"""Load task folders with harbor 0.25's own task loader; run with harbor's venv python.

    python load_tasks.py TASK_DIR ...   → one JSON line per folder: what harbor read, or its error.
"""

import json
import sys

from harbor.models.task.task import Task

for folder in sys.argv[1:]:
    try:
        task = Task(folder)
    except Exception as error:   # report every folder, not only the first harbor refuses
        print(json.dumps({"path": folder, "error": f"{type(error).__name__}: {error}"}))
        continue
    config = task.config
    print(json.dumps({
        "path": folder, "name": task.name, "instruction": task.instruction, "valid": Task.is_valid_dir(folder),
        "agent_timeout_sec": config.agent.timeout_sec, "verifier_timeout_sec": config.verifier.timeout_sec,
        "network_mode": config.environment.network_mode.value, "cpus": config.environment.cpus,
        "memory_mb": config.environment.memory_mb, "storage_mb": config.environment.storage_mb,
        "build_timeout_sec": config.environment.build_timeout_sec, "metadata": config.metadata,
        "solve_sh": task.paths.solve_path.is_file(), "test_sh": task.paths.discovered_test_path is not None,
    }))
