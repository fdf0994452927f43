"""How long a Harbor task session takes to start, and its tests to run, on the Docker engine at DOCKER_HOST.

    python benchmarks/harbor_tasks.py [--tasks examples/harbor_tasks] [--repeats 10]

Prints: a cold image build (a task whose environment/ the engine has not seen), a cold container (no warm pool) to
its agent's first answer, a container taken from a filled warm pool, and the task's tests (the verifier) on a
solved task; each as p50 and p95 over the repeats. docs/benchmarks.md holds the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from envkit.harbor import find_tasks, load_task
from envkit.harbor.container import open_task_container, task_limits, task_options
from envkit.harbor.images import task_image
from envkit.harbor.verifier import verify
from envkit.sandbox import close_pools
from envkit.sandbox.docker import DockerSandbox
from envkit.sandbox.pool import pool_for


def timed(function: object) -> float:
    started = time.perf_counter()
    function()  # type: ignore[operator]
    return time.perf_counter() - started


def report(name: str, seconds: list[float]) -> None:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    print(f"{name:<28} p50 {statistics.median(ordered) * 1000:8.1f} ms   p95 {p95 * 1000:8.1f} ms   (n={len(ordered)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=str(Path(__file__).resolve().parents[1] / "examples" / "harbor_tasks"))
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    task = next(iter(find_tasks(args.tasks).values()))[0]
    print(f"task {task.name} of {args.tasks}; engine {os.environ.get('DOCKER_HOST', 'default')}")

    builds = []
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(3):
            copy = Path(scratch) / f"cold-{uuid.uuid4().hex[:8]}"
            shutil.copytree(task.path, copy)
            (copy / "environment" / ".cold").write_text(uuid.uuid4().hex)   # content the engine has not seen
            builds.append(timed(lambda: task_image(load_task(copy))))
    report("cold image build", builds)

    os.environ["ENVKIT_SANDBOX_WARM"] = "0"
    close_pools()
    report("cold container", [timed(lambda: open_task_container(task).close()) for _ in range(args.repeats)])

    image, workdir = task_image(task)
    os.environ["ENVKIT_SANDBOX_WARM"] = "2"
    pool = pool_for(("bench", task.path), lambda: DockerSandbox(task_limits(task), image, None,
                                                                  task_options(task, workdir)))
    pool.take().close()   # the first take starts the pool filling
    warm = []
    for _ in range(args.repeats):
        deadline = time.monotonic() + 60
        while pool.waiting < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        started = time.perf_counter()
        box = pool.take()
        warm.append(time.perf_counter() - started)
        box.close()
    report("container from the warm pool", warm)
    close_pools()
    os.environ["ENVKIT_SANDBOX_WARM"] = "0"

    verifier = []
    for _ in range(args.repeats):
        with open_task_container(task) as box:
            box.copy_in(task.solution_dir, "/solution")
            box.run(["bash", "-c", "chmod +x /solution/solve.sh && /solution/solve.sh"], timeout_s=task.agent_timeout_s)
            started = time.perf_counter()
            verdict = verify(box, task)
            verifier.append(time.perf_counter() - started)
            assert verdict.reward == 1.0, verdict
    report("verifier (tests on a solved task)", verifier)


if __name__ == "__main__":
    main()
