"""`envkit new`: the rendered env is complete, installs, passes its own tests and serves; bad names write nothing."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from envkit import EnvClient
from envkit.publish.scaffold import render_env
from envkit.testing import ServedProcess
from envkit.publish.validate import read_front_matter

EXPECTED_FILES = {
    ".dockerignore", ".gitignore", "Dockerfile", "README.md", "pyproject.toml",
    "demo_env/__init__.py", "demo_env/client.py", "demo_env/environment.py", "demo_env/models.py",
    "demo_env/policies.py", "demo_env/server.py", "tests/test_demo_env.py",
}


def envkit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envkit.cli", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`envkit new demo_env` run once, as a user would, for the tests that only read the result."""
    output = tmp_path_factory.mktemp("new")
    done = envkit("new", "demo_env", "--output-dir", str(output / "envs"))
    assert done.returncode == 0, done.stderr
    assert "pip install -e" in done.stdout and "envkit serve" in done.stdout
    return output / "envs" / "demo_env"


def test_new_writes_a_complete_env_and_nothing_else(rendered: Path) -> None:
    files = {path.relative_to(rendered).as_posix() for path in rendered.rglob("*") if path.is_file()}
    assert files == EXPECTED_FILES
    assert os.listdir(rendered.parent) == ["demo_env"]  # no scratch folder left behind
    for path in rendered.rglob("*"):
        if path.is_file():
            assert "cookiecutter" not in path.read_text() and "{{" not in path.read_text(), path


def test_rendered_names_card_and_manifest_fit_together(rendered: Path) -> None:
    card = read_front_matter(rendered / "README.md")
    assert card["sdk"] == "docker" and card["app_port"] == 8000 and "envkit" in card["tags"]
    assert card["title"] == "Demo Env (envkit)"
    project = tomllib.loads((rendered / "pyproject.toml").read_text())
    assert project["project"]["name"] == "demo-env"
    assert project["tool"]["envkit"] == {"name": "demo_env",
                                         "environment": "demo_env.environment:DemoEnvEnvironment"}
    assert "class DemoEnvClient(EnvClient)" in (rendered / "demo_env" / "client.py").read_text()
    assert "@tool" in (rendered / "demo_env" / "environment.py").read_text()


def venv_over_this_interpreter(venv: Path) -> None:
    """A fresh venv that also sees the packages of the running interpreter (envkit, pytest), venv or not."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    (site_packages,) = (venv / "lib").glob("python*/site-packages")
    outer = "; ".join(f"site.addsitedir({folder!r})" for folder in site.getsitepackages())
    (site_packages / "_outer_interpreter.pth").write_text(f"import site; {outer}\n")


def test_rendered_env_installs_editable_and_its_own_tests_pass(rendered: Path, tmp_path: Path) -> None:
    """`pip install -e` into a fresh venv; envkit and pytest come from the interpreter running these tests."""
    venv = tmp_path / "venv"
    venv_over_this_interpreter(venv)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-deps", "-e", str(rendered)],
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    located = subprocess.run([str(venv / "bin" / "python"), "-c", "import demo_env; print(demo_env.__file__)"],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert located.stdout.strip() == str(rendered / "demo_env" / "__init__.py")
    tests = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            str(rendered)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "6 passed" in tests.stdout


def test_envkit_serve_serves_the_rendered_env(rendered: Path) -> None:
    with ServedProcess(str(rendered)) as served, EnvClient(served.url).sync() as env:
        first = env.reset(seed=4)
        assert "Guess a number between 1 and 100" in first.observation["message"]
        result = env.step({"guess": 50})
        assert result.observation["guesses_left"] == 6
        called = env.call("guess", number=20)
        assert called.observation["guesses_left"] == 5
        assert env.metadata()["name"] == "demo_env"


def test_the_rendered_env_validates_without_a_warning_and_evaluates(rendered: Path) -> None:
    """Ready out of the box: its own tasks (a test split), episode length and reward range, scripted players."""
    checked = envkit("validate", str(rendered))
    assert checked.returncode == 0, checked.stdout
    assert checked.stdout.splitlines()[-1] == f"{rendered}: valid (10 checks, 0 failed, 0 warnings)"
    played = envkit("eval", "--env", str(rendered), "--policy", "random", "--policy", "solver", "--json")
    assert played.returncode == 0, played.stderr
    rows = {row["model"]: row for row in json.loads(played.stdout)["rows"]}
    assert rows["policy:solver"]["episodes"] == 30 and rows["policy:solver"]["successes"] == 30
    assert rows["policy:random"]["episodes"] == 30 and rows["policy:random"]["successes"] < 30
    with ServedProcess(str(rendered)) as served:
        with EnvClient(served.url).sync() as env:
            metadata = env.metadata()
        over_url = envkit("validate", served.url)
    assert (metadata["episode_length"], metadata["reward_range"]) == (7, [0.0, 1.0])
    assert over_url.returncode == 0 and over_url.stdout.splitlines()[-1].endswith("0 failed, 0 warnings)"), \
        over_url.stdout


def test_the_rendered_env_trains_with_budgets_fitted_to_its_episode_length(rendered: Path, tmp_path: Path) -> None:
    """One step of the tiny model (offline): the turn budget comes from EPISODE_LENGTH (7 guesses + 2), not the
    3 turns an environment that declares no length gets."""
    done = subprocess.run([sys.executable, "-m", "envkit.cli", "train", "--env", str(rendered), "--max-steps", "1",
                           "--output-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    assert "episode budget: 9 tool-calling turns" in done.stderr and "(episodes take 7 tool calls)" in done.stderr
    assert (tmp_path / "run" / "metrics.jsonl").is_file()


@pytest.mark.parametrize("name, message", [
    ("", "the env name is empty"),
    ("My-Env", "'My-Env' is not a Python identifier"),
    ("9lives", "try `env_9lives`"),
    ("my env", "try `my_env`"),
    ("MyEnv", "must be lowercase"),
    ("_private", "must be lowercase and start with a letter"),
    ("class", "is a Python keyword"),
    ("match", "is a Python keyword"),
    ("json", "already a module name (standard library or envkit)"),
    ("envkit", "already a module name"),
    ("tests", "names a folder an env keeps beside its package"),
    ("wheels", "or one `envkit push` leaves out"),
    ("fastapi", "the name of an installed module"),
    ("echo", "'echo' is the name of a bundled env (catch, coding, echo, wordle)"),
    ("wordle", "pick another name, e.g. `my_wordle`"),
])
def test_bad_names_are_usage_errors_that_write_nothing(tmp_path: Path, name: str, message: str) -> None:
    done = envkit("new", name, "--output-dir", str(tmp_path / "out"))
    assert done.returncode == 2
    assert message in done.stderr
    assert not (tmp_path / "out").exists()


def test_an_existing_target_is_left_untouched(tmp_path: Path) -> None:
    (tmp_path / "demo_env").mkdir()
    (tmp_path / "demo_env" / "notes.txt").write_text("mine")
    done = envkit("new", "demo_env", cwd=tmp_path)
    assert done.returncode == 2
    assert "already exists" in done.stderr and "nothing was changed" in done.stderr
    assert [path.name for path in (tmp_path / "demo_env").iterdir()] == ["notes.txt"]
    assert (tmp_path / "demo_env" / "notes.txt").read_text() == "mine"


def test_output_dir_that_is_a_file_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("")
    done = envkit("new", "demo_env", "--output-dir", str(tmp_path / "taken"))
    assert done.returncode == 2
    assert "is a file, not a folder" in done.stderr


def test_a_failed_render_removes_the_folders_it_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cookiecutter.generate

    def fail(**_: object) -> str:
        raise OSError("disk full")

    monkeypatch.setattr(cookiecutter.generate, "generate_files", fail)
    with pytest.raises(OSError, match="disk full"):
        render_env("demo_env", tmp_path / "a" / "b")
    assert list(tmp_path.iterdir()) == []


def misaligned_continuations(source: str) -> list[int]:
    """Lines continuing a bracket opened with text after it that do not start under that text (visual indent)."""
    import io
    import tokenize

    tokens = [token for token in tokenize.generate_tokens(io.StringIO(source).readline)
              if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)]
    stack: list[tuple[int, int] | None] = []   # per open bracket: where its continuation lines must start, or None
    wrong, last_row = [], 0
    for index, token in enumerate(tokens):
        if token.start[0] != last_row and stack and stack[-1] is not None and token.string not in ")]}":
            if token.start[1] != stack[-1][1]:
                wrong.append(token.start[0])
        last_row = token.end[0]
        if token.string in "([{" and token.type == tokenize.OP:
            following = tokens[index + 1] if index + 1 < len(tokens) else None
            hanging = following is None or following.start[0] != token.start[0]
            stack.append(None if hanging else (token.start[0], token.end[1]))
        elif token.string in ")]}" and token.type == tokenize.OP and stack:
            stack.pop()
    return wrong


@pytest.mark.parametrize("name", ["g", "word_ladder_puzzle_env"])
def test_any_name_keeps_the_code_and_the_layout_block_aligned(tmp_path: Path, name: str) -> None:
    folder = render_env(name, tmp_path)
    for path in folder.rglob("*.py"):
        assert misaligned_continuations(path.read_text()) == [], path
    readme = (folder / "README.md").read_text()
    block = readme.split("## Layout", 1)[1].split("```")[1].strip().splitlines()
    columns = {len(line) - len(line.split(None, 1)[1]) for line in block}
    assert len(columns) == 1, block


def test_the_alignment_check_finds_a_misaligned_line() -> None:
    assert misaligned_continuations("x = f(a,\n  b)\ny = f(\n    a)\n") == [2]
