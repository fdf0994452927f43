"""One error path for every `envkit` command, as a new user meets it: a mistake is one line on stderr that starts
`envkit COMMAND: error:`, exit 2 for a usage error and 1 for a failure, never a traceback; the folder the user
stands in is importable as it is by uvicorn; the help fits 80 columns. Real subprocesses of the installed
console script (`envkit`, not `python -m`, which would put the working folder on sys.path by itself)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from envkit import EnvClient
from envkit.app.targets import bundled_envs
from envkit.cli.main import COMMANDS
from envkit.errors import EnvError
from envkit.testing import free_port

ENVKIT = str(Path(sys.executable).with_name("envkit"))

#: A first environment as the README's "Write an environment" leads one to write it, in one file.
TTT = '''
from envkit import Action, Environment, Observation, State, tool


class MarkAction(Action):
    cell: int


class BoardObservation(Observation):
    board: str = ""


class TicTacToeEnvironment(Environment[MarkAction, BoardObservation, State]):
    """Tic-tac-toe against nobody: mark cells 0-8."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        self._state = State()
        self.cells = ["."] * 9

    def reset(self, seed=None, episode_id=None, **kwargs) -> BoardObservation:
        self.cells, self._state = ["."] * 9, State(episode_id=episode_id)
        return BoardObservation(board="".join(self.cells))

    def step(self, action: MarkAction) -> BoardObservation:
        self._state.step_count += 1
        if action.cell == 4:
            self.centre_taken_by.append("x")   # the author's bug: an AttributeError on the centre cell
        self.cells[action.cell] = "x"
        return BoardObservation(board="".join(self.cells), done="." not in self.cells)

    @property
    def state(self) -> State:
        return self._state

    @tool
    def play(self, cell: int) -> BoardObservation:
        {docstring}
        return self.step(MarkAction(cell=cell))
'''
DOCUMENTED = '''"""Mark a cell.

        Args:
            cell: The cell, 0 to 8.
        """'''


def write_ttt(folder: Path, *, documented: bool = True) -> Path:
    (folder / "ttt.py").write_text(TTT.replace("{docstring}", DOCUMENTED if documented else "pass"))
    return folder


def envkit(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ENVKIT, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=env or {**os.environ, "HF_HUB_OFFLINE": "1"})


def one_error_line(done: subprocess.CompletedProcess[str], command: str) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"envkit {command}: error: "), lines[0]
    return lines[0]


# -- one error path -------------------------------------------------------------------------------------------


def test_bare_envkit_prints_its_help_not_an_error() -> None:
    done = envkit()
    assert done.returncode == 2
    assert done.stdout.startswith("Usage: envkit [OPTIONS] COMMAND") and "Commands:" in done.stdout
    assert "error" not in done.stdout + done.stderr


@pytest.mark.parametrize("command, args, code, message", [
    ("serve", ["wordel"], 2, "did you mean 'wordle'?"),
    ("train", ["--env", "wordel"], 2, "did you mean 'wordle'?"),
    ("eval", ["--env", "wordel", "--policy", "random"], 2, "did you mean 'wordle'?"),
    ("validate", ["wordel"], 2, "did you mean 'wordle'?"),
    ("eval", ["--env", "wordle", "--env-url", "http://127.0.0.1:9", "--policy", "solver"], 1, "cannot connect"),
    ("train", ["--env-url", "http://127.0.0.1:9", "--max-steps", "1"], 1, "cannot connect"),
    ("bench", ["--url", "http://127.0.0.1:9", "--sessions", "1", "--steps", "1"], 1, "no session succeeded"),
    ("new", ["Bad-Name"], 2, "is not a Python identifier"),
    ("push", ["/no/such/folder"], 2, "does not exist"),
    ("bench", ["-q", "--url", "http://127.0.0.1:9", "--sessions", "1", "--steps", "1"], 1, "no session succeeded"),
])
def test_every_command_reports_a_mistake_the_same_way(command: str, args: list[str], code: int, message: str,
                                                      tmp_path: Path) -> None:
    """Also where an earlier `envkit train` left its run (the README's main job, run before the tests)."""
    (tmp_path / "envkit-train").mkdir()
    (tmp_path / "envkit-train" / "metrics.jsonl").write_text("{}\n")
    done = envkit(command, *args, cwd=tmp_path)
    assert done.returncode == code, done.stderr
    assert message in one_error_line(done, command)


def test_a_busy_port_is_reported_with_the_commands_prefix() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = envkit("serve", "echo", "--port", str(taken.getsockname()[1]))
    assert done.returncode == 1 and "is already in use" in one_error_line(done, "serve")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_fits_80_columns(command: str) -> None:
    done = envkit(command, "--help", env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    wide = [line for line in done.stdout.splitlines() if len(line) > 80]
    assert not wide, "\n".join(wide)


@pytest.mark.parametrize("command", ["serve", "train", "eval"])
def test_help_names_every_bundled_environment(command: str) -> None:
    """The help lists the bundled environments from where `envkit serve NAME` finds them: a new one is listed too."""
    done = envkit(command, "--help")
    assert f"({', '.join(bundled_envs())})" in " ".join(done.stdout.split()), done.stdout


# -- a first environment in the folder the user stands in -----------------------------------------------------


def test_a_tool_without_a_docstring_is_one_line_from_serve(tmp_path: Path) -> None:
    write_ttt(tmp_path, documented=False)
    done = envkit("serve", "ttt:TicTacToeEnvironment", "--port", str(free_port()), cwd=tmp_path)
    assert done.returncode == 2
    assert "play: tool has no docstring" in one_error_line(done, "serve")


def test_serve_imports_module_class_from_the_working_folder_and_shows_the_authors_traceback(tmp_path: Path) -> None:
    """As `uvicorn ttt:app` would find ttt.py there. The environment's own exception reaches the log with its
    traceback (the author's bug); a client's bad input does not."""
    write_ttt(tmp_path)
    server = subprocess.Popen([ENVKIT, "serve", "ttt:TicTacToeEnvironment", "--port", "0"], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert server.stdout is not None
        for _ in range(20):   # uvicorn's start-up lines, then envkit's
            line = server.stdout.readline()
            if "serving TicTacToeEnvironment on http://127.0.0.1:" in line or not line:
                break
        url = line.split(" on ")[1].split()[0]
        with EnvClient(url).sync() as env:
            env.reset()
            with pytest.raises(EnvError, match="VALIDATION_ERROR"):
                env.step({"cell": "centre"})
            assert env.step({"cell": 0}).observation["board"].startswith("x")
            with pytest.raises(EnvError, match="EXECUTION_ERROR: AttributeError"):
                env.step({"cell": 4})
        assert httpx.get(url + "/health", trust_env=False).status_code == 200
    finally:
        server.terminate()
        output = server.communicate(timeout=30)[0]
    assert "Traceback (most recent call last)" in output, output
    assert output.count("Traceback") == 1, output                    # the bad input logged no traceback
    assert f'{tmp_path / "ttt.py"}", line' in output and "self.centre_taken_by.append" in output


@pytest.mark.parametrize("command, args", [
    ("validate", ["ttt:TicTacToeEnvironment"]),
    ("eval", ["--env", "ttt:TicTacToeEnvironment", "--policy", "random", "--dataset", "rows.jsonl"]),
])
def test_other_commands_import_from_the_working_folder_too(tmp_path: Path, command: str, args: list[str]) -> None:
    write_ttt(tmp_path)
    (tmp_path / "rows.jsonl").write_text('{"seed": 1}\n{"seed": 2}\n')
    done = envkit(command, *args, cwd=tmp_path)
    assert "No module named 'ttt'" not in done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert "TicTacToeEnvironment" in done.stdout or "policy:random" in done.stdout


def test_eval_of_an_env_without_tasks_says_how_to_give_it_some(tmp_path: Path) -> None:
    done = envkit("eval", "--env", "ttt:TicTacToeEnvironment", "--policy", "random", cwd=write_ttt(tmp_path))
    assert done.returncode == 2
    assert 'its splits: none: declare TicTacToeEnvironment.TASKS = {"test": [...]}' in one_error_line(done, "eval")


def test_an_env_folder_with_a_tool_without_a_docstring_is_one_line_from_serve(tmp_path: Path) -> None:
    """The same mistake in an env folder (`envkit serve ./bad_env`)."""
    folder = tmp_path / "bad_env"
    folder.mkdir()
    write_ttt(folder, documented=False)
    (folder / "pyproject.toml").write_text('[project]\nname = "bad-env"\n[tool.envkit]\nname = "bad_env"\n'
                                           'environment = "ttt:TicTacToeEnvironment"\n')
    done = envkit("serve", "./bad_env", "--port", str(free_port()), cwd=tmp_path)
    assert done.returncode == 2 and "play: tool has no docstring" in one_error_line(done, "serve")


def test_validate_module_class_checks_the_class(tmp_path: Path) -> None:
    write_ttt(tmp_path)
    done = envkit("validate", "ttt:TicTacToeEnvironment", cwd=tmp_path)
    assert done.returncode == 0, done.stdout
    assert "no 'test' split: `envkit eval` plays an env's test tasks" in done.stdout     # no TASKS: a warning
    assert done.stdout.splitlines()[-1] == "ttt:TicTacToeEnvironment: valid (4 checks, 0 failed, 1 warnings)"
    write_ttt(tmp_path, documented=False)
    done = envkit("validate", "ttt:TicTacToeEnvironment", cwd=tmp_path)
    assert done.returncode == 1 and "play: tool has no docstring" in done.stdout
    assert "Traceback" not in done.stderr


# -- train's config -------------------------------------------------------------------------------------------


def test_a_bad_grpo_key_is_refused_before_anything_is_served_or_built(tmp_path: Path) -> None:
    config = tmp_path / "train.yaml"
    config.write_text(textwrap.dedent("""\
        max_steps: 1
        grpo:
          lr_scheduler_type: constant
          lerning_rate: 0.5
    """))
    done = envkit("train", "--config", str(config), "--output-dir", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 2
    line = one_error_line(done, "train")
    assert "grpo: lerning_rate is not a GRPOConfig field (did you mean learning_rate?)" in line
    assert not (tmp_path / "out").exists()
