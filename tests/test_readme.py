"""The README's example environment is real code: it is executed, served and played here."""

from __future__ import annotations

import re
from pathlib import Path

from envkit import EnvClient, create_app
from envkit.testing import running_server

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_environment_serves_and_plays() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    example = next(block for block in blocks if "class GuessEnvironment" in block)
    namespace: dict = {}
    exec(compile(example, str(README), "exec"), namespace)   # noqa: S102 — our own README
    app = create_app(namespace["GuessEnvironment"], namespace["GuessAction"], namespace["GuessObservation"],
                     max_concurrent_envs=4)
    with running_server(app) as url, EnvClient(url).sync() as env:
        assert env.reset(seed=9).observation["hint"].startswith("Guess a number")
        assert env.step({"number": 1}).observation["hint"] == "higher"
        result = env.call("guess", number=10)
        assert (result.text, result.reward, result.done) == ("Correct!", 1.0, True)
        assert [tool["function"]["name"] for tool in env.tools()] == ["guess"]


def test_ci_runs_the_readme_test_command() -> None:
    commands = re.findall(r"```bash\n(python3 -m venv .*?)\n```", README.read_text())
    test_command = next(command for command in commands if "pytest" in command)
    ci_script = (README.parent / ".ci" / "run").read_text()
    assert test_command in ci_script.splitlines()
