"""OpenEnv environments served by envkit unchanged: environments written by us against OpenEnv 0.10's API
(tests/openenv_envs: an MCP one in OpenEnv's folder layout, a `WeightedSum`/`Gate` rubric, a discounted
`TrajectoryRubric`) give OpenEnv's own client the same observations and rewards, step by step over seeded
episodes, under `envkit serve` as under OpenEnv's own server. envkit serves them from a venv holding openenv 0.10
(fastmcp 3, mcp 1.x) that also sees the test runner's packages, as a user installs envkit beside openenv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from conftest import chat_server_process, third_party_python
from envkit.testing import ServedProcess, free_port, running_server
from judge_server import judge_app

ENVS = Path(__file__).resolve().parent / "openenv_envs"
PEER = Path(__file__).resolve().parent / "openenv_peer"
GUESS = f"{ENVS / 'rubric_games.py'}:GuessEnvironment"
WALK = f"{ENVS / 'rubric_games.py'}:WalkEnvironment"
JUDGED = f"{ENVS / 'rubric_games.py'}:JudgedEnvironment"


@pytest.fixture(scope="module")
def openenv_envkit_python() -> str:
    """openenv 0.10 in its own venv, which also sees the runner's packages (envkit among them)."""
    return third_party_python("openenv-envkit", "openenv==0.10.0", "openenv", "ENVKIT_OPENENV_ENVKIT_PYTHON",
                              sees_runner=True)


@contextmanager
def envkit_serving(python: str, target: str, *args: str) -> Iterator[str]:
    served = ServedProcess(target, *args, startup_timeout=180)
    served.command[0] = python
    with served:
        yield served.url


@contextmanager
def openenv_serving(python: str, target: str) -> Iterator[str]:
    """OpenEnv's own server for `target` (`openenv_peer/serve_openenv.py`) on a free 127.0.0.1 port."""
    port = free_port()
    with tempfile.TemporaryDirectory() as logs, \
            chat_server_process([python, str(PEER / "serve_openenv.py"), target, str(port)], port,
                                Path(logs) / "openenv.log", env=dict(os.environ), start_timeout=180) as url:
        yield url


def play(python: str, url: str, actions: list[dict], seeds: list[int]) -> list[dict]:
    done = subprocess.run([python, str(PEER / "play_seeded.py"), url, json.dumps(actions), *map(str, seeds)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def without_metadata(lines: list[dict]) -> list[dict]:
    """The lines with the observations' metadata left out (envkit adds the rubric's components there)."""
    return [{**line, "observation": {key: value for key, value in line["observation"].items() if key != "metadata"}}
            for line in lines]


@pytest.mark.parametrize(("target", "actions"), [
    (GUESS, [{"guess": guess} for guess in (5, 2, 7, 3)]),
    (WALK, [{"direction": direction} for direction in (1, -1, 1, 1, 1, 1)]),
    (str(ENVS / "tally_env"), [{"type": "call_tool", "tool_name": "add", "arguments": {"amount": amount}}
                               for amount in (3, 4)]),
], ids=["weighted_sum_gate", "trajectory", "mcp_folder"])
def test_same_rewards_under_openenv_and_envkit(openenv_envkit_python: str, target: str, actions: list[dict]) -> None:
    seeds = [0, 1, 2, 3]
    with openenv_serving(openenv_envkit_python, target) as url:
        theirs = play(openenv_envkit_python, url, actions, seeds)
    with envkit_serving(openenv_envkit_python, target) as url:
        ours = play(openenv_envkit_python, url, actions, seeds)
    assert len(ours) == len(theirs) > len(seeds)
    assert without_metadata(ours) == without_metadata(theirs)
    assert any(line["reward"] not in (0, 0.0, None) for line in theirs) or "tally" in target


def test_llm_judge_gives_the_same_rewards(openenv_envkit_python: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenEnv's `LLMJudge` (its `OpenAIClient`) asks a real chat endpoint on 127.0.0.1 (`judge_server.py`, scripted)."""
    calls: list[str] = []
    with running_server(judge_app(calls)) as judge:
        monkeypatch.setenv("JUDGE_URL", judge + "/v1")
        actions = [{"text": "so kind"}, {"text": "refuse"}]
        with openenv_serving(openenv_envkit_python, JUDGED) as url:
            theirs = play(openenv_envkit_python, url, actions, [0, 1])
        with envkit_serving(openenv_envkit_python, JUDGED) as url:
            ours = play(openenv_envkit_python, url, actions, [0, 1])
    assert without_metadata(ours) == without_metadata(theirs)
    assert [line["reward"] for line in ours] == [None, 1.0, 0.0] * 2
    assert len(calls) == 8


def test_evaluated_and_trained_with_rubric_columns(openenv_envkit_python: str, tmp_path: Path) -> None:
    """`envkit eval` (a random policy) and `envkit train` (the tiny model, 2 GRPO steps on CPU) in the venv that holds
    openenv; the rubric's leaves are the table's columns and the run's metrics."""
    evaluated = subprocess.run([openenv_envkit_python, "-m", "envkit.cli", "eval", "--env", GUESS, "--policy", "random",
                                "--games", "4"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    header = next(line for line in evaluated.stdout.splitlines() if line.startswith("model"))
    assert "rubric 0" in header and "rubric 1 rubric" in header and "rubric 2" in header
    trained = subprocess.run([openenv_envkit_python, "-m", "envkit.cli", "train", "--env", GUESS, "--max-steps", "2",
                              "--reward", "env", "--reward", "rubric_1_rubric=0.5", "--json"],
                             capture_output=True, text=True, timeout=600, cwd=tmp_path,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert trained.returncode == 0, trained.stderr[-3000:]
    summary = json.loads(trained.stdout)
    assert summary["steps"] == 2 and summary["lost"] == 0
    assert {"GuessEnvironment_rubric_0", "GuessEnvironment_rubric_1_rubric", "GuessEnvironment_rubric_2"} <= set(
        summary["end"])


def test_rubric_leaves_are_components_and_the_trajectory_is_discounted(openenv_envkit_python: str) -> None:
    with envkit_serving(openenv_envkit_python, GUESS) as url:
        metrics = [metric["name"] for metric in httpx.get(url + "/metadata", trust_env=False).json()["metrics"]]
        lines = play(openenv_envkit_python, url, [{"guess": 9}], [0])
    assert metrics == ["rubric_0", "rubric_1_rubric", "rubric_2"]
    components = lines[-1]["observation"]["metadata"]["reward_components"]
    assert set(components) == set(metrics)
    assert lines[-1]["reward"] == pytest.approx(0.5 * components["rubric_0"] + 0.4 * components["rubric_1_rubric"]
                                                + 0.1 * components["rubric_2"])
    with envkit_serving(openenv_envkit_python, WALK) as url:
        lines = play(openenv_envkit_python, url, [{"direction": 1}] * 3, [0])
    assert lines[-1]["done"] and lines[-1]["reward"] == 1.0
    assert lines[-1]["observation"]["metadata"]["step_rewards"] == {"rubric": pytest.approx([0.81, 0.9, 1.0])}


def test_mcp_environment_folder_serves_its_tools(openenv_envkit_python: str) -> None:
    with envkit_serving(openenv_envkit_python, str(ENVS / "tally_env"), "--max-concurrent-envs", "4") as url:
        listed = httpx.get(url + "/tools", trust_env=False).json()
        done = subprocess.run([openenv_envkit_python, str(PEER / "tally_tools.py"), url], capture_output=True,
                              text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    names = sorted(tool["function"]["name"] if "function" in tool else tool["name"]
                   for tool in (listed["tools"] if isinstance(listed, dict) else listed))
    assert names == ["add", "read"]
    assert json.loads(done.stdout.splitlines()[-1]) == {"tools": ["add", "read"], "results": [8, 12, 12]}


def test_import_envkit_never_imports_openenv() -> None:
    done = subprocess.run([sys.executable, "-c", "import sys, envkit, envkit.app.targets, envkit.rubrics; "
                           "print('openenv' in sys.modules)"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
