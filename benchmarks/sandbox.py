"""Sandboxes side by side: session open -> first command's result, commands per second, sandboxes held at once with
their memory, and what 1,000 churned sessions leave behind.

    python benchmarks/sandbox.py            # local and landlock always; docker when an engine answers at DOCKER_HOST
    python benchmarks/sandbox.py --start-only --runs 200    # only the session-open figures
    python benchmarks/sandbox.py --harbor 500 --episodes 200 --clients 8   # only a Harbor folder under load

References in the same run: a bare subprocess (`true`), `bwrap ... true`, and `docker run --rm --network none IMAGE
true` per session. Results go in docs/benchmarks.md#sandboxes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from envkit.sandbox import Sandbox, SandboxLimits, SandboxUnavailableError, close_pools, open_sandbox  # noqa: E402
from envkit.sandbox.base import Uids  # noqa: E402
from envkit.sandbox.landlock import LandlockSandbox, landlock_facilities  # noqa: E402
from envkit.sandbox.local import LocalSandbox, local_facilities  # noqa: E402
from envkit.sandbox.pool import pool_for  # noqa: E402

IMAGE = "python:3.11-slim"
LIMITS = SandboxLimits()


def timed(action: Callable[[], object], times: int, between: Callable[[], None] = lambda: None) -> list[float]:
    """Seconds each of `times` calls of `action` took; whatever it returns is closed afterwards, untimed."""
    seconds = []
    for _ in range(times):
        between()
        start = time.perf_counter()
        made = action()
        seconds.append(time.perf_counter() - start)
        if hasattr(made, "close"):
            made.close()
    return seconds


def row(name: str, seconds: list[float]) -> None:
    ms = sorted(s * 1000 for s in seconds)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(f"  {name:<44} p50 {statistics.median(ms):8.1f} ms   p99 {p99:8.1f} ms   (n={len(ms)})")


def first_result(backend: str) -> Sandbox:
    """A sandbox opened and its first command answered (the caller closes it)."""
    box = open_sandbox(backend)
    assert box.run("true").exit_code == 0
    return box


def wait_warm(key: tuple) -> Callable[[], None]:
    def wait() -> None:
        pool = pool_for(key, lambda: None)   # the pool exists once a sandbox of that kind was opened
        while pool.waiting < 1:
            time.sleep(0.01)
    return wait


def cold(make: Callable[[], Sandbox]) -> Callable[[], Sandbox]:
    def run() -> Sandbox:
        box = make().start().wait_ready()
        box.run("true")
        return box
    return run


def per_second(backend: str, count: int) -> float:
    with open_sandbox(backend) as box:
        start = time.perf_counter()
        for _ in range(count):
            box.run("true")
        return count / (time.perf_counter() - start)


def rss_mb(pids_of: Callable[[str], bool]) -> float:
    listed = subprocess.run(["ps", "-eo", "uid=,rss=,args="], capture_output=True, text=True).stdout
    return sum(int(line.split()[1]) for line in listed.splitlines() if pids_of(line)) / 1024


def held_at_once(count: int) -> None:
    first = Uids.BASE + (os.getpid() % Uids.BLOCKS) * Uids.PER_SERVER
    start = time.perf_counter()
    boxes = [LocalSandbox(LIMITS).start() for _ in range(count)]
    for box in boxes:
        box.wait_ready()
    opened = time.perf_counter() - start
    answered = sum(box.run("true").exit_code == 0 for box in boxes)
    memory = rss_mb(lambda line: first <= int(line.split()[0]) < first + Uids.PER_SERVER)
    print(f"  {count} local sandboxes open at once: {answered} answered; opened in {opened:.1f} s; "
          f"{memory:.0f} MB RSS in all, {memory / count:.1f} MB per sandbox")
    for box in boxes:
        box.close()


def churn(backend: str, count: int) -> None:
    from sandbox_helpers import leftovers
    mounts = len(Path("/proc/self/mountinfo").read_text().splitlines())
    start = time.perf_counter()
    for _ in range(count):
        first_result(backend).close()
    seconds = time.perf_counter() - start
    close_pools()
    time.sleep(1)
    left = leftovers()
    host_mounts = len(Path("/proc/self/mountinfo").read_text().splitlines()) - mounts
    print(f"  {count} churned {backend} sessions in {seconds:.1f} s: left {left} (host mount table {host_mounts:+d})")


def harbor_load(tasks: int, episodes: int, clients: int) -> None:
    """`clients` threads play `episodes` episodes (reset, one command, submit) of a folder of `tasks` tiny tasks sharing
    one image, as a training run's rollouts would: idle containers held (sampled), and containers started per second
    (the engine's own start events)."""
    import random
    import tempfile
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from harbor_helpers import CHECK_HELLO, make_task, task_container_starts
    from sandbox_helpers import owned_containers

    from envkit.harbor import harbor_environment
    from envkit.sandbox import SandboxBusyError
    from envkit.sandbox.pool import WARM_SLOTS

    root = Path(tempfile.mkdtemp(prefix="envkit-harbor-load-"))
    for n in range(tasks):
        make_task(root / f"task-{n:03d}", solve="echo hello > /app/hello.txt", test=CHECK_HELLO)
    environment = harbor_environment(root)
    names = sorted(environment.BY_NAME)
    played = {"episodes": 0, "solved": 0, "busy": 0}
    idle, held, unsolved = [], [], []
    done = threading.Event()
    lock = threading.Lock()

    def sample() -> None:
        while not done.wait(0.5):
            idle.append(WARM_SLOTS.held)
            held.append(len(owned_containers(os.getpid(), "label=envkit.harbor.task")))

    def play(seed: int) -> None:
        draw = random.Random(seed)
        env = environment()
        try:
            for _ in range(episodes // clients):
                try:
                    env.reset(task_id=draw.choice(names))
                    env.run_command("echo hello > /app/hello.txt")
                    verdict = env.submit()
                    with lock:
                        played["solved"] += verdict.reward == 1.0
                        played["episodes"] += 1
                        if verdict.reward != 1.0:
                            unsolved.append(verdict.output.splitlines()[0])
                except SandboxBusyError:
                    with lock:
                        played["busy"] += 1
        finally:
            env.close()

    environment().reset(task_id=names[0])          # the shared image built once, before the clock starts
    close_pools()
    sampler = threading.Thread(target=sample, daemon=True)
    with task_container_starts(os.getpid(), times=True) as starts:
        start = time.perf_counter()
        sampler.start()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(play, range(clients)))
        seconds = time.perf_counter() - start
        done.set()
        time.sleep(1)       # for the engine's last events to arrive
    per_second = max((sum(t <= s < t + 1 for s in starts) for t in starts), default=0)
    close_pools()
    print(f"  {tasks} tasks (one image), {clients} clients, {played['episodes']} episodes in {seconds:.1f} s "
          f"({played['episodes'] / seconds:.2f}/s), {played['solved']} solved, {played['busy']} refused as busy")
    for line in sorted(set(unsolved)):
        print(f"    unsolved: {unsolved.count(line)} x {line[:160]}")
    print(f"  idle warm containers held: max {max(idle, default=0)}, mean {statistics.mean(idle or [0]):.1f} "
          f"(cap ENVKIT_SANDBOX_WARM_MAX={os.environ.get('ENVKIT_SANDBOX_WARM_MAX', '8')}); task containers in all: "
          f"max {max(held, default=0)}")
    print(f"  containers started: {len(starts)} ({len(starts) / max(1, played['episodes']):.2f} per episode), "
          f"at most {per_second} in any second (ENVKIT_SANDBOX_CREATE_RATE="
          f"{os.environ.get('ENVKIT_SANDBOX_CREATE_RATE', 'unset: 10 for containers')})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="opens per local figure (docker: a fifth)")
    parser.add_argument("--held", type=int, default=256, help="local sandboxes to hold at once")
    parser.add_argument("--churn", type=int, default=1000, help="sessions to churn per backend (docker: a tenth)")
    parser.add_argument("--start-only", action="store_true", help="only the session-open figures")
    parser.add_argument("--harbor", type=int, metavar="TASKS", help="only a Harbor folder of TASKS tasks under load")
    parser.add_argument("--episodes", type=int, default=200, help="episodes played in the Harbor folder")
    parser.add_argument("--clients", type=int, default=8, help="clients playing the Harbor folder at once")
    args = parser.parse_args()
    if args.harbor:
        print(f"a Harbor folder under load (load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
        harbor_load(args.harbor, args.episodes, args.clients)
        return
    facilities = local_facilities()
    print(facilities.describe())
    print(landlock_facilities().describe())
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    try:
        from envkit.sandbox.docker import DockerSandbox, docker_facilities
        docker_facilities().check_image(IMAGE)
        docker = True
    except SandboxUnavailableError as error:
        print(f"docker: skipped ({error})")
        docker = False

    print("\nsession open -> first command's result")
    row("bare subprocess `true` (reference)", timed(lambda: subprocess.run(["true"]), args.runs))
    bwrap = [*facilities.bwrap_argv(LIMITS), "true"]
    row("bwrap ... true (reference)", timed(lambda: subprocess.run(bwrap), args.runs))
    first_result("local").close()
    row("local, warm pool", timed(lambda: first_result("local"), args.runs, wait_warm(("local", LIMITS))))
    row("local, cold", timed(cold(lambda: LocalSandbox(LIMITS)), args.runs))
    first_result("landlock").close()
    row("landlock, warm pool", timed(lambda: first_result("landlock"), args.runs, wait_warm(("landlock", LIMITS))))
    row("landlock, cold", timed(cold(lambda: LandlockSandbox(LIMITS)), args.runs))
    if docker:
        runs = max(5, args.runs // 5)
        docker_true = ["docker", "run", "--rm", "--network", "none", IMAGE, "true"]
        row(f"docker run --rm {IMAGE} true (reference)", timed(lambda: subprocess.run(docker_true), runs))
        first_result("docker").close()
        row("docker, warm pool", timed(lambda: first_result("docker"), runs * 2,
                                       wait_warm(("docker", LIMITS, IMAGE))))
        row("docker, cold", timed(cold(lambda: DockerSandbox(LIMITS, IMAGE)), runs))

    if args.start_only:
        return
    print("\ncommands per second, one sandbox, `true` one after another")
    print(f"  local     {per_second('local', 500):8.0f} /s")
    print(f"  landlock  {per_second('landlock', 500):8.0f} /s")
    if docker:
        print(f"  docker    {per_second('docker', 500):8.0f} /s")

    print("\nsandboxes held at once")
    close_pools()
    held_at_once(args.held)

    print("\nchurn")
    churn("local", args.churn)
    if docker:
        churn("docker", max(10, args.churn // 10))
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
