"""Serve the same echo environment four ways and load each with the same `envkit bench` runs.

    python benchmarks/side_by_side.py              # full run, about 10 minutes on 2 cores
    python benchmarks/side_by_side.py --quick      # smaller loads, about 3 minutes

Servers: (a) envkit (`envkit serve echo`), (b) OpenEnv 0.10.0 from PyPI in its own venv
(benchmarks/.venv-openenv, created when missing), (b') that OpenEnv environment class, unchanged, served by envkit
(`envkit serve ./openenv_echo.py:EchoEnvironment`, in benchmarks/.venv-openenv-envkit: openenv 0.10.0, seeing this
interpreter's packages, envkit among them), (c) a minimal FastAPI handler on uvicorn, (d) a
bare picows server, the reference of what a Python server can do on one core; on envkit, a `/ws`
step, an MCP `tools/call` and an ORS `/call` are compared too (`envkit bench --protocol`).
Each server runs pinned to core 0 and the load generator to core 1 (when there are two
cores); the load levels are interleaved across servers, round after round, because figures on
shared machines drift. Then each server, restarted fresh, is measured for memory per open
session, sessions opened and closed per second, and the ramp. Results go to
benchmarks/results/ (JSON, a Markdown table, a PNG chart); the table is also printed.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envkit.bench import run_churn, run_load, run_ramp, run_sync
from report import render  # benchmarks/report.py, beside this script

HERE = Path(__file__).resolve().parent
SERVERS_DIR = HERE / "servers"
OPENENV_VENV = HERE / ".venv-openenv"
OPENENV_REQUIREMENT = "openenv==0.10.0"
SERVER_CORE, LOAD_CORE = 0, 1
MAX_SESSIONS = "20000"
SERVER_KEYS = ("envkit", "openenv", "envkit-openenv", "fastapi", "picows")
#: The surfaces of envkit's default server compared per call (`envkit bench --protocol`).
SURFACES = ("ws", "mcp", "ors")


@dataclass
class Server:
    """One server process answering the echo protocol, pinned to the server core."""

    key: str
    label: str
    command: list[str]
    log_dir: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    start_s: list[float] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def start(self, timeout_s: float = 120.0) -> float:
        """Start the server and wait for `GET /health`; returns seconds from launch to healthy."""
        self.port = free_port()
        command = [part.replace("{port}", str(self.port)) for part in self.command]
        log = open(self.log_dir / f"{self.key}.log", "ab")
        began = time.perf_counter()
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_pin_server,
                                        cwd=SERVERS_DIR)
        while time.perf_counter() - began < timeout_s:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.label} exited with {self.process.returncode}; see {log.name}")
            if healthy(self.port):
                elapsed = time.perf_counter() - began
                self.start_s.append(elapsed)
                return elapsed
            time.sleep(0.01)
        self.stop()
        raise RuntimeError(f"{self.label} did not answer /health within {timeout_s:g} s; see {log.name}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(15)
        self.process = None

    def cpu_s(self) -> float:
        """CPU time (user + system) the server process has used so far, in seconds."""
        assert self.process is not None
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def status(self, field_name: str) -> int:
        """A number from /proc/PID/status: VmRSS (kB) or Threads."""
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
        raise KeyError(field_name)


def _pin_server() -> None:
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {SERVER_CORE})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def healthy(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def openenv_python(given: str | None) -> str:
    """The OpenEnv venv's python: the one given, or benchmarks/.venv-openenv (created when missing)."""
    if given:
        return given
    python = OPENENV_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {OPENENV_VENV} with {OPENENV_REQUIREMENT} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(OPENENV_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", OPENENV_REQUIREMENT], check=True)
    return str(python)


ENVKIT_SERVE = [sys.executable, "-m", "envkit.cli", "serve", "echo", "--port", "{port}", "--max-concurrent-envs",
                MAX_SESSIONS, "--log-level", "warning"]


def openenv_envkit_python() -> str:
    """A venv with openenv 0.10.0 that also sees this interpreter's packages (envkit, its server's dependencies):
    where envkit serves an OpenEnv environment (created when missing)."""
    home = HERE / ".venv-openenv-envkit"
    python = home / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
    site = next(home.glob("lib/python*/site-packages"))
    (site / "_runner_site.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    if subprocess.run([str(python), "-c", "import openenv"], capture_output=True).returncode != 0:
        print(f"installing {OPENENV_REQUIREMENT} into {home} (once)", flush=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", OPENENV_REQUIREMENT], check=True)
    return str(python)


def build_servers(openenv: str, openenv_envkit: str, log_dir: Path) -> list[Server]:
    return [
        Server("envkit", "envkit", ENVKIT_SERVE, log_dir),
        Server("openenv", "OpenEnv 0.10.0", [openenv, "openenv_echo.py", "--port", "{port}",
                                             "--max-concurrent-envs", MAX_SESSIONS], log_dir),
        Server("envkit-openenv", "envkit serving the OpenEnv class",
               [openenv_envkit, "-m", "envkit.cli", "serve", "./openenv_echo.py:EchoEnvironment", "--port", "{port}",
                "--max-concurrent-envs", MAX_SESSIONS, "--log-level", "warning"], log_dir),
        Server("fastapi", "minimal FastAPI", [sys.executable, "fastapi_echo.py", "--port", "{port}"], log_dir),
        Server("picows", "bare picows", [sys.executable, "picows_echo.py", "--port", "{port}"], log_dir),
    ]


def wall_time(command: list[str], runs: int = 7) -> float:
    """Median wall time of a command, in seconds."""
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def measure_startup(envkit: Server) -> dict[str, float]:
    python = [sys.executable]
    figures = {"python_bare_s": wall_time(python + ["-c", "pass"]),
               "import_envkit_s": wall_time(python + ["-c", "import envkit"]),
               "envkit_help_s": wall_time(python + ["-m", "envkit.cli", "--help"])}
    serve = []
    for _ in range(3):
        serve.append(envkit.start())
        envkit.stop()
    figures["serve_to_healthy_s"] = statistics.median(serve)
    return {key: round(value, 3) for key, value in figures.items()}


def steps_for(sessions: int, total: int) -> int:
    """Steps per session: about `total` in all, but at least 50 each so that opening and closing stay a small part."""
    return max(50, min(2000, total // sessions))


def measured_load(server: Server, sessions: int, steps: int, protocol: str = "ws") -> dict[str, Any]:
    """One `envkit bench` load, plus the server's CPU time per step: from the first step to the last close
    (`server_cpu_us_per_step`), and while the sessions step, closes left out (`..._stepping`)."""
    marks: list[float] = []

    async def mark() -> None:
        marks.append(server.cpu_s())

    result = run_sync(run_load(server.url, sessions, steps, protocol=protocol, timeout_s=180, on_open=mark,
                               on_stepped=mark)).to_dict()
    ended = server.cpu_s()
    for key, cpu in (("server_cpu_us_per_step", ended - marks[0] if marks else 0.0),
                     ("server_cpu_us_per_step_stepping", marks[1] - marks[0] if len(marks) == 2 else 0.0)):
        result[key] = round(cpu / result["steps"] * 1e6, 1) if result["steps"] else None
    return result


def load_matrix(servers: list[Server], levels: list[int], rounds: int, total: int) -> dict[str, dict[int, list]]:
    """Every level on every server, interleaved: round by round, level by level, servers rotated."""
    runs: dict[str, dict[int, list]] = {server.key: {level: [] for level in levels} for server in servers}
    for server in servers:
        run_sync(run_load(server.url, 16, 50))  # warm up
    for round_index in range(rounds):
        for level in levels:
            order = servers[round_index % len(servers):] + servers[:round_index % len(servers)]
            for server in order:
                run = measured_load(server, level, steps_for(level, total))
                runs[server.key][level].append(run)
                print(f"  round {round_index + 1} {server.label:>16} {level:>5} sessions: "
                      f"{run['steps_per_s']:>9,.0f} steps/s  p99 {run['step_latency_ms']['p99']} ms  "
                      f"server {run['server_cpu_us_per_step']} us/step ({run['server_cpu_us_per_step_stepping']} stepping)  ok {run['sessions_ok']}/{level}  "
                      f"loadgen {run['loadgen_cpu']:.0%}", flush=True)
    return runs


def surface_matrix(server: Server, rounds: int, sessions: int, calls: int) -> dict[str, Any]:
    """A `/ws` step, an MCP `tools/call` and an ORS `/call` of the echo tool on one envkit server, and a POST to a
    bare Starlette route (the floor of any HTTP call on this stack), interleaved."""
    floor = Server("http-floor", "bare Starlette POST", [sys.executable, "starlette_post.py", "--port", "{port}"],
                   server.log_dir)
    floor.start()
    targets = [(protocol, server, protocol) for protocol in SURFACES] + [("http-floor", floor, "mcp")]
    runs: dict[str, list] = {name: [] for name, _, _ in targets}
    try:
        for _, target, protocol in targets:
            run_sync(run_load(target.url, 16, 20, protocol=protocol))  # warm up
        for round_index in range(rounds):
            for name, target, protocol in targets[round_index % len(targets):] + targets[:round_index % len(targets)]:
                run = measured_load(target, sessions, calls, protocol)
                runs[name].append(run)
                print(f"  round {round_index + 1} {target.label} over {protocol:>3}, {sessions} sessions: "
                      f"{run['steps_per_s']:>9,.0f} calls/s  p99 {run['step_latency_ms']['p99']} ms  "
                      f"server {run['server_cpu_us_per_step_stepping']} us/call  ok {run['sessions_ok']}/{sessions}  "
                      f"mismatches {run['mismatches']}", flush=True)
    finally:
        floor.stop()
    return {"sessions": sessions, "rounds": rounds, "runs": runs}


async def memory_held(server: Server, sessions: int) -> dict[str, Any]:
    """Server RSS idle, with `sessions` held open, and after they closed; threads idle and held."""
    await run_load(server.url, 16, 10)
    await asyncio.sleep(1)
    idle_kb, idle_threads = server.status("VmRSS"), server.status("Threads")
    held: dict[str, int] = {}

    async def sample() -> None:
        await asyncio.sleep(1)
        held["rss"], held["threads"] = server.status("VmRSS"), server.status("Threads")

    result = await run_load(server.url, sessions, 1, on_open=sample, timeout_s=180)
    await asyncio.sleep(3)
    after_kb = server.status("VmRSS")
    opened = max(result.sessions_ok, 1)
    return {"sessions": sessions, "sessions_ok": result.sessions_ok, "idle_kb": idle_kb, "held_kb": held.get("rss"),
            "after_kb": after_kb, "kb_per_session": round((held.get("rss", idle_kb) - idle_kb) / opened, 1),
            "after_vs_idle": round(after_kb / idle_kb, 3), "threads_idle": idle_threads,
            "threads_held": held.get("threads")}


def per_server_checks(server: Server, hold: int, churn_s: float, ramp_budget: float) -> dict[str, Any]:
    server.start()
    try:
        memory = run_sync(memory_held(server, hold))
        print(f"  {server.label:>16} memory: {memory}", flush=True)
        cpu_before = server.cpu_s()
        churn = run_sync(run_churn(server.url, churn_s, workers=16)).to_dict()
        churn["server_cpu_ms_per_session"] = round((server.cpu_s() - cpu_before) / max(churn["sessions"], 1) * 1e3, 3)
        print(f"  {server.label:>16} churn: {churn['sessions_per_s']:,.0f} sessions/s", flush=True)
        ramp = run_sync(run_ramp(server.url, budget_s=ramp_budget, steps=3)).to_dict() if ramp_budget else None
        if ramp is not None:
            print(f"  {server.label:>16} ramp: {ramp['max_sessions_held']} held ({ramp['stopped_because']})", flush=True)
    finally:
        server.stop()
    return {"memory": memory, "churn": churn, "ramp": ramp}


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{os.cpu_count()} cores ({model}), {memory_gib:.0f} GiB, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller loads and one round (for a quick look)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the load matrix")
    parser.add_argument("--levels", default="1,16,64,256,1024", help="session counts, comma-separated")
    parser.add_argument("--openenv-python", help="python of an existing venv with openenv 0.10.0 installed")
    parser.add_argument("--only", help=f"comma-separated server keys ({','.join(SERVER_KEYS)})")
    parser.add_argument("--ramp-budget", type=float, default=60.0, help="seconds per server for the ramp (0: no ramp)")
    parser.add_argument("--surface-calls", type=int, default=100,
                        help="calls per session (64 sessions) comparing /ws, MCP and ORS on envkit (0: skip)")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="where results are written")
    args = parser.parse_args()
    rounds, total, hold, churn_s = (1, 6000, 1024, 3.0) if args.quick else (args.rounds, 30000, 2048, 5.0)
    levels = [int(level) for level in args.levels.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "logs").mkdir(exist_ok=True)
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {LOAD_CORE})
    selected = args.only.split(",") if args.only else list(SERVER_KEYS)
    unknown = set(selected) - set(SERVER_KEYS)
    if unknown:
        parser.error(f"unknown server(s) {', '.join(sorted(unknown))}; choose from {', '.join(SERVER_KEYS)}")
    openenv = openenv_python(args.openenv_python) if "openenv" in selected else ""
    openenv_envkit = openenv_envkit_python() if "envkit-openenv" in selected else ""
    servers = [server for server in build_servers(openenv, openenv_envkit, args.out / "logs")
               if server.key in selected]
    report: dict[str, Any] = {"machine": machine(), "levels": levels, "rounds": rounds, "servers": {}}
    envkit = next((server for server in servers if server.key == "envkit"), None)
    if envkit is not None:
        report["startup"] = measure_startup(envkit)
        print(f"start-up: {report['startup']}", flush=True)
    for server in servers:
        print(f"starting {server.label}: healthy after {server.start():.2f} s", flush=True)
    try:
        runs = load_matrix(servers, levels, rounds, total)
        if envkit is not None and args.surface_calls:
            report["surfaces"] = surface_matrix(envkit, rounds, 64, args.surface_calls)
    finally:
        for server in servers:
            server.stop()
    for server in servers:
        report["servers"][server.key] = {"label": server.label, "runs": runs[server.key], "start_s": server.start_s,
                                         **per_server_checks(server, hold, churn_s, args.ramp_budget)}
    (args.out / "side_by_side.json").write_text(json.dumps(report, indent=1))
    print(render(report, args.out))


if __name__ == "__main__":
    main()
