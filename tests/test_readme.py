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


def test_readme_training_snippet_runs_against_a_served_wordle(monkeypatch, tmp_path: Path) -> None:
    """The "From Python" block, run as written against a real wordle server. Only TRL is swapped for recorders:
    `GRPOTrainer` would load Qwen3 from the Hugging Face Hub, which cannot be reached here, and `GRPOConfig`
    refuses its bf16 default on a machine without a GPU."""
    import trl

    from envkit.serving import app_from_environment, resolve_target

    made: dict = {}

    class Recorder:
        def __init__(self, **kwargs: object) -> None:
            made.update(kwargs)

    monkeypatch.setattr(trl, "GRPOTrainer", Recorder)
    monkeypatch.setattr(trl, "GRPOConfig", dict)
    monkeypatch.chdir(tmp_path)
    block = next(block for block in re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
                 if "environment_factory(" in block)
    wordle = resolve_target("wordle").env_class
    with running_server(app_from_environment(wordle, env_name="wordle", max_concurrent_envs=4)) as url:
        exec(compile(block.replace("http://127.0.0.1:8001", url), str(README), "exec"), {})  # noqa: S102
        rows, factory, reward = made["train_dataset"], made["environment_factory"], made["reward_funcs"]
        assert made["args"] == {"max_tool_calling_iterations": 6}
        assert len(rows) > 0 and isinstance(rows[0]["prompt"], list)
        env = factory()
        assert "Wordle" in env.reset(**rows[0])
        env.guess(guess="[crane]")
        assert reward(environments=[env]) == [0.0]   # the game goes on: no reward yet
        env._close()
