"""The README's example environment is real code: it is executed, served and played here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from envkit import EnvClient, create_app
from envkit.testing import ServedProcess, running_server

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


def readme_example(name: str) -> str:
    """The README's python block that defines `name`."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    return next(block for block in blocks if name in block)


def test_readme_example_environment_honours_seed_zero_and_has_a_state_before_reset() -> None:
    namespace: dict = {}
    exec(compile(readme_example("class GuessEnvironment"), str(README), "exec"), namespace)  # noqa: S102
    app = create_app(namespace["GuessEnvironment"], namespace["GuessAction"], namespace["GuessObservation"],
                     max_concurrent_envs=4)
    with running_server(app) as url, EnvClient(url).sync() as env:
        assert env.state()["step_count"] == 0                          # before any reset: no AttributeError
        env.reset(seed=0)
        assert env.step({"number": 1}).observation["hint"] == "Correct!"   # seed 0 is a seed, not "no seed"
        env.reset()
        assert env.step({"number": 1}).observation["hint"] == "higher"


def test_readme_example_environment_saved_as_a_module_validates_and_evaluates(tmp_path: Path) -> None:
    """As the README says: saved as guess.py, `envkit validate` and `envkit eval` take it as module:Class from
    the folder it is in (the installed console script, which does not put that folder on sys.path itself)."""
    (tmp_path / "guess.py").write_text(readme_example("class GuessEnvironment"))
    envkit = str(Path(sys.executable).with_name("envkit"))
    checked = subprocess.run([envkit, "validate", "guess:GuessEnvironment"], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[-1] == "guess:GuessEnvironment: valid (4 checks, 0 failed, 0 warnings)"
    played = subprocess.run([envkit, "eval", "--env", "guess:GuessEnvironment", "--policy", "random", "--json"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert played.returncode == 0, played.stderr
    assert json.loads(played.stdout)["rows"][0]["episodes"] == 30


def test_readme_mcp_curl_lines_run_as_pasted() -> None:
    """The curl block, run by bash as written against `envkit serve echo` (only the port differs): the episode
    id of the second call is the one the first reply handed out."""
    block = next(block for block in re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
                 if "localhost:8001/mcp" in block)
    with ServedProcess("echo") as served:
        port = served.url.rsplit(":", 1)[1]
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.replace("localhost:8001", f"localhost:{port}")],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    decoder, replies, at = json.JSONDecoder(), [], 0
    while at < len(done.stdout.rstrip()):   # curl's replies end without a newline
        reply, at = decoder.raw_decode(done.stdout, at)
        replies.append(reply)
        at += len(done.stdout[at:]) - len(done.stdout[at:].lstrip())
    first, second, third = replies
    episode = first["result"]["structuredContent"]["episode_id"]
    assert second["result"]["structuredContent"]["episode_id"] == episode
    assert second["result"]["content"][0]["text"] == "hi" and not second["result"]["isError"]
    assert third["result"]["session_id"]


def test_a_rerun_output_folder_is_ignored_by_git() -> None:
    """The README says a rerun of `envkit train` writes envkit-train-2/, -3/, ...: none of them is committed."""
    for folder in ("envkit-train", "envkit-train-2", "envkit-train-13"):
        done = subprocess.run(["git", "check-ignore", "-q", f"{folder}/metrics.jsonl"], cwd=README.parent)
        assert done.returncode == 0, f"{folder}/ is not ignored"


def test_ci_runs_the_readme_test_command() -> None:
    commands = re.findall(r"```bash\n(python3 -m venv .*?)\n```", README.read_text())
    test_command = next(command for command in commands if "pytest" in command)
    ci_script = (README.parent / ".ci" / "run").read_text()
    assert test_command + " || exit $?" in ci_script.splitlines()


def test_readme_training_snippet_runs_against_a_served_wordle(monkeypatch, tmp_path: Path) -> None:
    """The "From Python" block, run as written against a real wordle server. Only the trainers (TRL's and envkit's)
    and TRL's config are swapped for recorders: `GRPOTrainer` would load Qwen3 from the Hugging Face Hub, which
    cannot be reached here, and `GRPOConfig` refuses its bf16 default on a machine without a GPU."""
    import trl

    import envkit.train.rollouts
    from envkit.serving import app_from_environment, resolve_target

    made: dict = {}

    class Recorder:
        def __init__(self, **kwargs: object) -> None:
            made.update(kwargs)

    monkeypatch.setattr(trl, "GRPOTrainer", Recorder)
    monkeypatch.setattr(envkit.train.rollouts, "GRPOTrainer", Recorder)
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
