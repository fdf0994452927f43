"""Every python block of the README and docs/ is run: here, or by the test named for it, or listed with what it needs
that cannot exist here (a Hub model, a GPU, another project's venv). A block that defines an environment is also
validated. A new block fails `test_every_block_is_run_or_says_why_not` until it is placed; every block compiles and
the envkit names it imports exist."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from envkit import EnvClient
from envkit.app.targets import app_from_environment, resolve_target
from envkit.publish.validate import validate_class
from envkit.testing import running_server

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: (page, a line of the block) of the blocks the tests below run.
RUN_HERE = {
    ("README.md", 'EnvClient("http://127.0.0.1:8001")'),
    ("environments.md", "class ShellEnvironment"),
    ("environments.md", "class ScoredGuessEnvironment"),
    ("serving.md", "max_concurrent_envs=64, session_timeout_s=300"),
    ("scale-out.md", "/replicas"),
}
#: Blocks another test runs, and which.
RUN_ELSEWHERE = {
    ("README.md", "class GuessEnvironment"): "test_readme.py: served, played, validated and evaluated as guess.py",
    ("training.md", "environment_factory("): "test_readme.py: run against a served wordle, the trainers recorded",
}
#: Blocks that cannot run here, with what they need.
NOT_RUN_HERE = {
    ("agents.md", 'reference_command("Write solution.py'): "a model server behind the sandbox's channel",
    ("agents.md", "my-mini-swe-agent"): "an image with mini-swe-agent installed, and a model server",
    ("agents.md", "episode = AgentEpisode(proxy"): "a model engine (`engine`) for the capture proxy",
    ("agents.md", "class MyEnvironment(SandboxEpisode"): "an outline of SandboxEpisode's hooks (bodies `...`, the "
                                                       "author's MyAction and TASKS); the coding env and Harbor tasks "
                                                       "are two whole ones, tested as bundled and Harbor envs",
    ("environments.md", "class Format(Rubric)"): "an outline of a judged environment (`Environment[...]`, a step "
                                                   "body `...`) and a judge endpoint; tests/test_rubrics.py scores "
                                                   "the same tree against a judge on 127.0.0.1",
    ("harbor.md", "run_rollout("): "OpenEnv 0.10's venv and a vLLM server",
    ("mcp.md", "MCPToolClient"): "OpenEnv 0.10's venv (tests/test_mcp.py plays the same calls from it)",
    ("mcp.md", "from mcp.client import Client"): "the mcp 2.x venv (tests/test_mcp.py plays the same calls from it)",
    ("ors.md", "OpenRewardSpec"): "Qwen3-1.7B from the Hugging Face Hub",
    ("publishing.md", "from_docker_image"): "an image the user built (tests/test_docker.py runs an envkit image)",
    ("security.md", "allowed_hosts"): "a public Space's hostname",
    ("serving.md", "HarborEnv"): "OpenEnv 0.10's venv (tests/test_harbor_task_api.py runs the same calls from it)",
    ("training.md", "CaptureProxy(engine)"): "a model and tokenizer (`model`, `tokenizer`) loaded first",
    ("training.md", "HarnessRolloutWorker"): "TRL's async GRPO on a GPU and a served model",
}
FENCE = re.compile(r"```python\n(.*?)```", flags=re.S)


def blocks() -> list[tuple[str, str]]:
    """(page name, block) of every python block."""
    return [(page.name, block) for page in PAGES for block in FENCE.findall(page.read_text())]


def block(page: str, marker: str) -> str:
    (found,) = [text for name, text in blocks() if name == page and marker in text]
    return found


def test_every_block_is_run_or_says_why_not() -> None:
    places = [*RUN_HERE, *RUN_ELSEWHERE, *NOT_RUN_HERE]
    for page, text in blocks():
        matching = [place for place in places if place[0] == page and place[1] in text]
        assert len(matching) == 1, f"{page}: a python block is {'placed twice' if matching else 'not run'}:\n{text}"
    for page, marker in places:
        block(page, marker)   # each place still names one block


@pytest.mark.parametrize(("page", "text"), blocks(),
                         ids=[f"{page}-{index}" for index, (page, _) in enumerate(blocks())])
def test_every_block_compiles_and_the_envkit_names_it_imports_exist(page: str, text: str) -> None:
    tree = ast.parse(text, filename=page)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "envkit":
            module = importlib.import_module(str(node.module))
            missing = [alias.name for alias in node.names if not hasattr(module, alias.name)]
            assert not missing, f"{page}: {node.module} has no {', '.join(missing)}"


def run(text: str, namespace: dict[str, Any], page: str) -> dict[str, Any]:
    exec(compile(text, page, "exec"), namespace)  # noqa: S102
    return namespace


def guess_game() -> dict[str, Any]:
    """The README's GuessEnvironment, as the pages that build on it assume."""
    return run(block("README.md", "class GuessEnvironment"), {}, "README.md")


def as_module(tmp_path: Path, name: str, text: str) -> str:
    """`text` saved as module `name` on sys.path; its `module:` prefix for targets."""
    (tmp_path / f"{name}.py").write_text(text)
    if str(tmp_path) not in sys.path:
        sys.path.insert(0, str(tmp_path))
    return name


def test_the_readme_client_block_plays_echo(capsys: pytest.CaptureFixture[str]) -> None:
    echo = resolve_target("echo").env_class
    with running_server(app_from_environment(echo, env_name="echo")) as url:
        run(block("README.md", 'EnvClient("http://127.0.0.1:8001")').replace("http://127.0.0.1:8001", url), {},
            "README.md")
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == "hi" and printed[-2].endswith("0.5 False")


def test_the_sandbox_example_validates_and_its_shell_runs_in_a_sandbox(tmp_path: Path) -> None:
    module = as_module(tmp_path, "shell_doc_example", block("environments.md", "class ShellEnvironment"))
    report = validate_class(f"{module}:ShellEnvironment")
    assert report.ok and all(check.status == "ok" for check in report.checks), report.table()
    shell = resolve_target(f"{module}:ShellEnvironment").env_class
    with running_server(app_from_environment(shell, max_concurrent_envs=2)) as url, EnvClient(url).sync() as env:
        assert "How many lines" in env.reset(lines=4).observation["output"]
        assert env.call("run", command="wc -l < notes.txt").text.strip() == "4"


def test_the_metrics_example_validates_and_reports_its_episode(tmp_path: Path) -> None:
    readme, metrics = block("README.md", "class GuessEnvironment"), block("environments.md", "ScoredGuessEnvironment")
    module = as_module(tmp_path, "scored_doc_example", readme + "\n\n" + metrics)
    report = validate_class(f"{module}:ScoredGuessEnvironment")
    assert report.ok, report.table()
    found = importlib.import_module(module)
    env = found.ScoredGuessEnvironment()
    env.reset(seed=9)                      # the secret is 10
    for number in (5, 20, 10):
        env.step(found.GuessAction(number=number))
    assert env.episode_metrics() == {"won": 1, "guesses": 3, "low_guesses": 1}


def test_the_serving_block_builds_the_app() -> None:
    namespace = run(block("serving.md", "session_timeout_s=300"), guess_game(), "serving.md")
    assert namespace["app"].state.envkit_pool.max_sessions == 64


def test_the_scale_out_block_makes_its_clients() -> None:
    run(block("scale-out.md", "/replicas"), {"EnvClient": EnvClient}, "scale-out.md")
