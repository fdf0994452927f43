"""Space images, as `envkit push --dry-run` stages them, built and run on the real engine as a Space runs them: a
plain `docker run` (the engine's default seccomp profile, no added capability, the image's non-root user). Bubblewrap
cannot run there, so their sandboxes are the landlock backend's: the coding env's solver is graded at 100% on every
HumanEval task through the image's tools, and a freshly scaffolded env given a tool that uses `open_sandbox` runs
commands that cannot read its own code. The attacks against the coding image are in test_sandbox_attacks.py
(parameter `image`)."""

from __future__ import annotations

import sys
from pathlib import Path

from docker_engine import serving_image, skip_without_engine, staged_env_image

from envkit import EnvClient
from envkit.publish.scaffold import render_env

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


SHELL_TOOL = """    @tool
    def shell(self, command: str) -> str:
        \"\"\"Run a command in this session's sandbox.

        Args:
            command: The command line.
        \"\"\"
        from envkit.sandbox import open_sandbox

        if getattr(self, "box", None) is None:
            self.box = open_sandbox()
        done = self.box.run(command)
        return done.stdout + done.stderr

"""


def test_a_scaffolded_env_that_opens_sandboxes_runs_them_in_its_unprivileged_image(tmp_path: Path) -> None:
    skip_without_engine()
    folder = render_env("boxed_env", tmp_path)
    module = folder / "boxed_env" / "environment.py"
    module.write_text(module.read_text().replace("    @tool\n", SHELL_TOOL + "    @tool\n", 1))
    image = staged_env_image("boxed-env", folder, tmp_path / "stage")
    with serving_image(image) as url, EnvClient(url).sync() as env:
        env.reset(seed=1)
        assert env.call("shell", command="id -u; echo made > x; cat x").text == "1000\nmade\n"
        own_code = env.call("shell", command="cat /home/*/app/boxed_env/environment.py "
                                             "/usr/local/lib/python3*/*-packages/boxed_env/environment.py; "
                                             "python3 -c 'import boxed_env'").text
        assert "No module named 'boxed_env'" in own_code and "def shell" not in own_code, own_code
