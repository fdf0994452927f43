"""The coding env's Space image, as `envkit push --dry-run` stages it, built and run on the real engine as a Space
runs it: a plain `docker run` (the engine's default seccomp profile, no added capability, the image's non-root user).
Bubblewrap cannot run there, so its sandboxes are the landlock backend's; the solver's solutions are graded at 100%
on every HumanEval task, through the image's tools. The attacks against the same image are in
test_sandbox_attacks.py (parameter `image`)."""

from __future__ import annotations

import sys
from pathlib import Path

from docker_engine import serving_image, skip_without_engine, staged_env_image

from envkit import EnvClient

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "envs" / "coding"))
from coding_env import CodingEnvironment  # noqa: E402
from coding_env.policies import TOOL_PLAYERS  # noqa: E402


def solve(url: str, task_ids: list[str]) -> dict[str, float]:
    """The solver's reward on each task, played over one client after another."""
    rewards = {}
    with EnvClient(url).sync() as client:
        for task_id in task_ids:
            act = TOOL_PLAYERS["solver"](0)
            result = client.reset(task_id=task_id)
            while not result.done:
                tool, arguments = act(result.observation, {"task_id": task_id})
                result = client.call(tool, **arguments)
            rewards[task_id] = result.reward
    return rewards


def test_the_solver_scores_every_humaneval_task_in_the_unprivileged_image(tmp_path: Path) -> None:
    skip_without_engine()
    image = staged_env_image("coding", REPO / "envs" / "coding", tmp_path / "stage")
    task_ids = [task["task_id"] for task in CodingEnvironment.TASKS["test"]]
    with serving_image(image) as url:
        rewards = solve(url, task_ids)     # one session after another: the image's Python 3.11.2 can fail ast.parse
                                           # run on several threads at once (SystemError, fixed in 3.11.5)
    assert len(rewards) == len(task_ids) == 164
    assert {task: reward for task, reward in rewards.items() if reward != 1.0} == {}
