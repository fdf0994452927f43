"""Run Harbor task folders the way harbor 0.25's oracle and verifier do, with nothing but the `docker` command.

    python tests/harbor_task_check.py examples/harbor_tasks [TASK ...]

For each task: build `environment/`, start a container (`--network none`, `sleep infinity`), copy `solution/` to
/solution and run `/solution/solve.sh` as harbor's oracle does (chmod +x, output to /logs/agent/oracle.txt, cwd
the image's WORKDIR, task.toml's [solution.env]), copy `tests/` to /tests and run `/tests/test.sh` as its verifier
does (same cwd, [verifier.env]), then read the reward
(reward.json before reward.txt, reward.txt as {"reward": value}). Then once more in a fresh container with no
solve.sh. Prints one JSON line per task: {"task", "oracle", "nothing"}; exits 1 unless every oracle reward is 1
and every do-nothing reward is 0. Containers are removed, images kept (tag envkit-harbor-check/NAME).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

TEST_CMD = "(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1"
SOLVE_CMD = "(/solution/solve.sh) > /logs/agent/oracle.txt 2>&1"


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


def task_dirs(root: Path, names: list[str]) -> list[Path]:
    if (root / "task.toml").exists():
        return [root]
    found = sorted(p.parent for p in root.glob("*/task.toml"))
    return [p for p in found if not names or p.name in names]


def env_options(task: Path, table: str) -> list[str]:
    """`-e NAME=VALUE` for each variable of task.toml's [TABLE.env] (literal values only: no ${VAR} templates)."""
    variables = tomllib.loads((task / "task.toml").read_text()).get(table, {}).get("env", {})
    return [option for name, value in variables.items() for option in ("-e", f"{name}={value}")]


def reward_of(container: str) -> dict[str, float] | None:
    for name in ("reward.json", "reward.txt"):
        result = docker("exec", container, "cat", f"/logs/verifier/{name}", check=False)
        if result.returncode == 0:
            return json.loads(result.stdout) if name == "reward.json" else {"reward": float(result.stdout)}
    return None


def run_once(task: Path, image: str, *, solve: bool) -> dict[str, float] | None:
    container = docker("run", "-d", "--network", "none", image, "sleep", "infinity").stdout.strip()
    try:
        docker("exec", "-u", "root", container, "mkdir", "-p", "/logs/agent", "/logs/verifier")
        if solve:
            docker("cp", f"{task / 'solution'}/.", f"{container}:/solution")
            docker("exec", "-u", "root", container, "chmod", "+x", "/solution/solve.sh")
            docker("exec", "-e", "DEBIAN_FRONTEND=noninteractive", *env_options(task, "solution"), container,
                   "bash", "-c", SOLVE_CMD, check=False)
        docker("cp", f"{task / 'tests'}/.", f"{container}:/tests")
        docker("exec", "-u", "root", container, "chmod", "+x", "/tests/test.sh")
        docker("exec", *env_options(task, "verifier"), container, "bash", "-c", TEST_CMD, check=False)
        return reward_of(container)
    finally:
        docker("rm", "-f", container, check=False)


def main(argv: list[str]) -> int:
    root, names = Path(argv[0]).resolve(), argv[1:]
    ok = True
    for task in task_dirs(root, names):
        image = f"envkit-harbor-check/{task.name}"
        build = docker("build", "-q", "-t", image, str(task / "environment"), check=False)
        if build.returncode != 0:
            print(json.dumps({"task": task.name, "build_error": build.stderr.strip()[-500:]}))
            ok = False
            continue
        oracle, nothing = run_once(task, image, solve=True), run_once(task, image, solve=False)
        print(json.dumps({"task": task.name, "oracle": oracle, "nothing": nothing}), flush=True)
        ok &= bool(oracle) and oracle.get("reward") == 1 and bool(nothing) and nothing.get("reward") == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
