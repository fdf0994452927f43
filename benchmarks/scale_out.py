"""Scale-out figures: steps/s and sessions held for 1 and 2 `--workers` and 1 and 2 Ray replicas.

Two environments: echo (a step is nearly free: the server's own cost shows) and `burn_env`
(benchmarks/cpu_env: each step burns ~1 ms of CPU, so one process tops out near 1,000 steps/s).
Each server is started with `envkit serve` exactly as a user would, loaded with the same code
`envkit bench` runs (`run_load` for steps/s at a fixed number of sessions, `run_ramp` for the
most sessions held open at once with >= 95% success), and stopped before the next starts.
Clients reach Ray replicas through the registry (`http://HOST:PORT/replicas`), connecting to each
replica directly.

    python benchmarks/scale_out.py                  # about 10 minutes on 2 cores
    python benchmarks/scale_out.py --quick          # smaller loads, no ramp
    python benchmarks/scale_out.py --only workers   # or: ray

The load generator runs in this process, on the same machine: on 2 cores it competes with the
servers for CPU, as does anything else running. Each row records the load average before it.
Results go to benchmarks/results/scale_out.json and a table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "cpu_env"))

from envkit.bench import run_load, run_ramp, run_sync  # noqa: E402
from envkit.testing import ServedProcess  # noqa: E402

ENVS = {"echo": "echo", "burn 1 ms": "burn_env:BurnEnvironment"}
#: Keep Ray on the loopback address (it otherwise resolves 127.0.0.1 to the machine's outward address).
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
_REGISTRY = re.compile(r"registry listing live replicas at (http://[\d.]+:\d+/replicas)")


def server_env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(HERE / "cpu_env"), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "PYTHONPATH": path, **LOOPBACK_ONLY}


@contextmanager
def workers_server(target: str, workers: int, limit: int) -> Iterator[tuple[str, int | None]]:
    args = ["--max-concurrent-envs", str(limit), "--session-timeout", "600"]
    if workers > 1:
        args += ["--workers", str(workers)]
    with ServedProcess(target, *args, env=server_env(), startup_timeout=120) as served:
        assert served.process is not None
        yield served.url, served.process.pid
        served.terminate()


@contextmanager
def ray_cluster(num_cpus: int) -> Iterator[str]:
    from ray.cluster_utils import Cluster

    os.environ.update(server_env())
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": num_cpus, "node_ip_address": "127.0.0.1",
                                                            "include_dashboard": False})
    try:
        yield cluster.address
    finally:
        cluster.shutdown()


@contextmanager
def ray_server(address: str, target: str, replicas: int, limit: int) -> Iterator[tuple[str, int | None]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "envkit.cli", "serve", target, "--ray", address, "--replicas", str(replicas),
         "--num-cpus", "1", "--port", "0", "--max-concurrent-envs", str(limit), "--session-timeout", "600",
         "--log-level", "warning"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=server_env())
    assert process.stdout is not None
    output: list[str] = []
    registry = ""
    for line in process.stdout:
        output.append(line)
        match = _REGISTRY.search(line)
        if match:
            registry = match.group(1)
            break
    if not registry:
        process.kill()
        raise RuntimeError("envkit serve --ray did not start:\n" + "".join(output))
    threading.Thread(target=lambda: output.extend(process.stdout), daemon=True).start()
    try:
        yield registry, None
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(60)


def server_pids(url: str, fallback: int | None) -> list[int]:
    """The processes serving `url`: a registry's replicas, `--workers`' workers, or the one server."""
    document = httpx.get(url if url.endswith("/replicas") else url + "/health", timeout=10).json()
    rows = document.get("replicas") or document.get("workers")
    return [int(row["pid"]) for row in rows] if rows else [fallback] if fallback else []


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used so far (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def measure(url: str, pid: int | None, sessions: int, steps: int, ramp: bool, ramp_max: int) -> dict[str, Any]:
    pids = server_pids(url, pid)
    marks: dict[str, float] = {}

    async def opened() -> None:
        marks["cpu"], marks["wall"] = cpu_seconds(pids), time.perf_counter()

    async def stepped() -> None:
        marks["cores"] = (cpu_seconds(pids) - marks["cpu"]) / (time.perf_counter() - marks["wall"])

    load = run_sync(run_load(url, sessions, steps, timeout_s=120, on_open=opened, on_stepped=stepped))
    row: dict[str, Any] = {"sessions": sessions, "steps_per_s": load.steps_per_s, "sessions_ok": load.sessions_ok,
                           "p50_ms": load.step_latency_ms.get("p50"), "p99_ms": load.step_latency_ms.get("p99"),
                           "server_cores": round(marks.get("cores", 0.0), 2), "server_processes": len(pids),
                           "loadgen_cpu": load.loadgen_cpu, "failures": load.failures}
    if ramp:
        held = run_sync(run_ramp(url, start=256, max_sessions=ramp_max, steps=1, budget_s=40))
        row.update(sessions_held=held.max_sessions_held, ramp_stopped=held.stopped_because)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller loads and no ramp")
    parser.add_argument("--only", choices=["workers", "ray"], help="only one way of scaling out")
    parser.add_argument("--sessions", type=int, default=64, help="sessions stepping at once [64]")
    parser.add_argument("--ramp-max", type=int, default=4096, help="most sessions the ramp tries [4096]")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "scale_out.json")
    options = parser.parse_args()
    steps = {"echo": 100 if options.quick else 300, "burn 1 ms": 20 if options.quick else 60}
    limit = options.ramp_max * 2
    rows: list[dict[str, Any]] = []

    def record(env: str, how: str, count: int, server: tuple[str, int | None]) -> None:
        load_before = os.getloadavg()[0]
        row = {"env": env, "scale_out": how, "servers": count, "load_avg_before": round(load_before, 2),
               **measure(*server, options.sessions, steps[env], not options.quick, options.ramp_max)}
        rows.append(row)
        print(json.dumps(row), flush=True)

    if options.only != "ray":
        for env, target in ENVS.items():
            for workers in (1, 2):
                with workers_server(target, workers, limit) as server:
                    record(env, "workers", workers, server)
    if options.only != "workers":
        with ray_cluster(num_cpus=2) as address:
            for env, target in ENVS.items():
                for replicas in (1, 2):
                    with ray_server(address, target, replicas, limit // replicas) as server:
                        record(env, "ray replicas", replicas, server)

    import platform

    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "when": time.strftime("%Y-%m-%d %H:%M"),
               "sessions": options.sessions, "steps": steps, "quick": options.quick}
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n")
    print()
    print(table(rows))


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| env | scale-out | servers | steps/s @sessions | p99 ms | server cores busy | sessions held | "
             "load avg before |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        held = row.get("sessions_held")
        lines.append(f"| {row['env']} | {row['scale_out']} | {row['servers']} | {row['steps_per_s']:,.0f} "
                     f"@{row['sessions']} | {row['p99_ms']} | {row['server_cores']} | {'' if held is None else f'{held:,}'} | "
                     f"{row['load_avg_before']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
