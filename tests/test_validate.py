"""`envkit validate`: bundled envs and a fresh template pass; each kind of mistake fails with its fix."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sample_envs import CounterAction, CounterEnvironment, CounterObservation, SingleSessionEnvironment

from envkit import create_app
from envkit.publish.scaffold import render_env
from envkit.app.targets import bundled_envs
from envkit.testing import ServedProcess, running_server
from envkit.publish.validate import Report, example_from_schema, validate_folder, validate_url

BUNDLED = sorted(bundled_envs())
_names = itertools.count()


def envkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envkit.cli", *args], capture_output=True, text=True, timeout=120)


def statuses(report: Report) -> dict[str, str]:
    return {check.name: check.status for check in report.checks}


def detail(report: Report, name: str) -> str:
    return next(check.detail for check in report.checks if check.name == name)


@pytest.fixture
def env_folder(tmp_path: Path) -> Path:
    """A freshly rendered env with a name of its own (each imports as a separate package)."""
    return render_env(f"checked_env_{next(_names)}", tmp_path)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))


# -- folders that pass ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_env_folders_are_valid(name: str) -> None:
    done = envkit("validate", name, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and {check["status"] for check in report["checks"]} == {"ok"}
    assert {check["name"] for check in report["checks"]} == {
        "space files", "readme front matter", "manifest", "import", "server app", "tools", "tasks", "server limits",
        "dockerfile", "sandbox"}


def test_a_fresh_template_is_valid_as_a_table(tmp_path: Path) -> None:
    folder = render_env("fresh_env", tmp_path)
    done = envkit("validate", str(folder))
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["CHECK", "RESULT", "DETAIL"]
    assert re.search(r"^tools\s+OK\s+1 tool\(s\), every argument typed and described: guess$", done.stdout, re.M)
    assert lines[-1] == f"{folder}: valid (10 checks, 0 failed, 0 warnings)"


# -- folders that fail ---------------------------------------------------------------------------


def test_missing_folder_fails_with_exit_one(tmp_path: Path) -> None:
    done = envkit("validate", str(tmp_path / "nowhere"))
    assert done.returncode == 1
    assert "is not a folder" in done.stdout


def test_missing_space_files_are_named(env_folder: Path) -> None:
    (env_folder / "Dockerfile").unlink()
    report = validate_folder(env_folder)
    assert not report.ok
    assert statuses(report)["space files"] == "fail" and "missing Dockerfile" in detail(report, "space files")
    assert "dockerfile" not in statuses(report)


MISTAKES = [
    # (file, text, replacement, check, what the check says)
    ("README.md", "---\ntitle:", "title:", "readme front matter", "has no YAML front matter"),
    ("README.md", "sdk: docker", "sdk: gradio", "readme front matter", "sdk is 'gradio'; envkit Spaces need `sdk: docker`"),
    ("README.md", "app_port: 8000\n", "", "readme front matter", "app_port is missing"),
    ("README.md", "  - envkit\n", "", "readme front matter", "tags lack `envkit`"),
    ("README.md", "tags:\n", "tags: [\n", "readme front matter", "the front matter is not valid YAML"),
    ("pyproject.toml", "[tool.envkit]", "[tool.other]", "manifest", "has no [tool.envkit] table"),
    ("pyproject.toml", 'dependencies = ["envkit>=', 'dependencies = ["pydantic>=', "manifest", "dependencies lack envkit"),
    ("pyproject.toml", 'name = "checked', 'title = "checked', "manifest", "[tool.envkit] has no name"),
    ("pyproject.toml", 'Environment"', 'Enviroment"', "import", "has no attribute"),
    ("PKG/environment.py", "MAX_GUESSES = 7", "MAX_GUESSES = 7 / 0", "import",
     "raised ZeroDivisionError: division by zero"),
    ("PKG/environment.py", "            number: The guess, a whole number between 1 and 100.\n", "", "tools",
     "argument `number` is not described; add `number: ...` under `Args:`"),
    ("PKG/environment.py", "number: The guess, a whole number between 1 and 100.", "number:", "tools",
     "argument `number` of tool `guess` has an empty description"),
    ("PKG/server.py", 'env_name="', 'no_such_option=1, env_name="', "server app",
     "unknown server setting no_such_option"),
    ("Dockerfile", "HOST=0.0.0.0", "MAX_CONCURRENT_ENVS=0 HOST=0.0.0.0", "server limits",
     "max_concurrent_envs must be at least 1, got 0 (with the Dockerfile's ENV)"),
    ("Dockerfile", "RUN pip install wheels/*.whl .", "RUN pip install envkit .", "dockerfile",
     "no `RUN pip install wheels/*.whl .` step"),
    ("Dockerfile", "USER envkit\n", "", "dockerfile", "the server would run as root"),
    ("Dockerfile", "USER envkit\n", "USER root\n", "dockerfile", "the server would run as root"),
    ("Dockerfile", "HEALTHCHECK", "LABEL check=", "dockerfile", "no HEALTHCHECK on /health"),
    ("Dockerfile", 'CMD ["sh", "-c", "exec envkit serve', 'CMD ["sh", "-c", "exec uvicorn app', "dockerfile",
     "does not run `envkit serve`"),
    ("Dockerfile", ' --host \\"$HOST\\"', "", "dockerfile", "listens on 127.0.0.1 unless given --host"),
    ("Dockerfile", "EXPOSE 8000", "EXPOSE 7860", "dockerfile", "app_port 8000 (README front matter) is not EXPOSEd"),
    ("Dockerfile", "PORT=8000", "PORT=7860", "dockerfile", "ENV PORT=7860 differs from app_port 8000"),
    ("Dockerfile", "FROM python:3.11-slim\n", "", "dockerfile", "no FROM line"),
]


@pytest.mark.parametrize("file, old, new, check, message", MISTAKES)
def test_each_mistake_fails_its_check_with_the_fix(env_folder: Path, file: str, old: str, new: str, check: str,
                                                  message: str) -> None:
    edit(env_folder / file.replace("PKG", env_folder.name), old, new)
    report = validate_folder(env_folder)
    assert not report.ok
    assert statuses(report)[check] == "fail"
    assert message in detail(report, check)


def test_a_broken_manifest_skips_the_import_checks(env_folder: Path) -> None:
    edit(env_folder / "pyproject.toml", "[tool.envkit]", "[tool.other]")
    assert "import" not in statuses(validate_folder(env_folder))


def test_an_env_without_tools_is_a_warning_not_a_failure(env_folder: Path) -> None:
    edit(env_folder / env_folder.name / "environment.py", "    @tool\n", "")
    report = validate_folder(env_folder)
    assert statuses(report)["tools"] == "warn" and report.ok
    assert "no @tool methods" in detail(report, "tools")


def test_dockerfile_concurrency_the_env_cannot_give(env_folder: Path) -> None:
    edit(env_folder / env_folder.name / "environment.py", "SUPPORTS_CONCURRENT_SESSIONS = True",
         "SUPPORTS_CONCURRENT_SESSIONS = False")
    edit(env_folder / "Dockerfile", "HOST=0.0.0.0", "MAX_CONCURRENT_ENVS=8 HOST=0.0.0.0")
    report = validate_folder(env_folder)
    assert statuses(report)["server limits"] == "fail"
    assert "does not declare SUPPORTS_CONCURRENT_SESSIONS" in detail(report, "server limits")
    assert "(with the Dockerfile's ENV)" in detail(report, "server limits")


def test_the_sandbox_an_image_will_use_is_said_and_one_a_space_cannot_run_fails(env_folder: Path) -> None:
    assert detail(validate_folder(env_folder), "sandbox") == "the environment opens no sandbox"
    module = env_folder / env_folder.name / "environment.py"
    module.write_text(module.read_text() + "\nfrom envkit.sandbox import open_sandbox  # noqa: E402\n")
    assert detail(validate_folder(env_folder), "sandbox").startswith("landlock (Landlock ABI 6")
    edit(env_folder / "Dockerfile", "HOST=0.0.0.0", "ENVKIT_SANDBOX=local HOST=0.0.0.0")
    report = validate_folder(env_folder)
    assert statuses(report)["sandbox"] == "fail" and "set it to landlock or leave it out" in detail(report, "sandbox")
    edit(env_folder / "Dockerfile", "ENVKIT_SANDBOX=local HOST", "HOST")
    edit(env_folder / "Dockerfile", "FROM python:3.11-slim", "FROM python:3.11-alpine")
    report = validate_folder(env_folder)
    assert statuses(report)["sandbox"] == "fail" and "apk add --no-cache libseccomp" in detail(report, "sandbox")


# -- servers -------------------------------------------------------------------------------------


def counter_app(env: type = CounterEnvironment, **settings: Any) -> Any:
    return create_app(env, CounterAction, CounterObservation, **settings)


def test_a_running_bundled_env_passes_every_url_check() -> None:
    with ServedProcess("echo") as served:
        done = envkit("validate", served.url, "--json")
    assert done.returncode == 0, done.stdout
    report = json.loads(done.stdout)
    assert [check["name"] for check in report["checks"]] == [
        "health", "schema", "tools", "reset", "step", "tool call", "two sessions", "mcp (openenv)", "mcp (standard)",
        "ors catalogue", "ors tools", "ors session", "ors call", "ors delete", "ors refusals"]
    assert {check["status"] for check in report["checks"]} == {"ok"}


def test_a_running_fresh_template_passes_every_url_check(tmp_path: Path) -> None:
    folder = render_env("served_env", tmp_path)
    with ServedProcess(str(folder)) as served:
        done = envkit("validate", served.url)
    assert done.returncode == 0, done.stdout
    lines = [" ".join(line.split()) for line in done.stdout.splitlines()]
    assert any(line.startswith("step OK action {'guess': 50}") for line in lines)  # the Action model's own example
    assert any(line.startswith("tool call OK guess({'number': 1})") for line in lines)


def test_a_single_session_server_refuses_the_second_session_as_it_should() -> None:
    with running_server(counter_app(SingleSessionEnvironment, max_concurrent_envs=1)) as url:
        report = asyncio.run(validate_url(url))
    assert report.ok and statuses(report)["two sessions"] == "ok"
    assert "the second got CapacityError" in detail(report, "two sessions")


class FailingStepEnvironment(CounterEnvironment):
    """Resets fine; every step raises."""

    def step(self, action: CounterAction) -> CounterObservation:
        raise RuntimeError("the board is on fire")


def test_a_step_that_raises_fails() -> None:
    with running_server(counter_app(FailingStepEnvironment, max_concurrent_envs=4)) as url:
        report = asyncio.run(validate_url(url))
    assert not report.ok
    assert statuses(report)["reset"] == "ok" and statuses(report)["step"] == "fail"
    assert "EXECUTION_ERROR" in detail(report, "step") and "the board is on fire" in detail(report, "step")


class PickyAction(CounterAction):
    """An action whose schema admits values the model then refuses."""

    code: str

    def model_post_init(self, context: Any) -> None:
        if self.code != "secret":
            raise ValueError("code must be the secret")


class PickyEnvironment(CounterEnvironment):
    pass


def test_an_action_the_env_refuses_is_a_warning_with_the_fix() -> None:
    app = create_app(PickyEnvironment, PickyAction, CounterObservation, max_concurrent_envs=4)
    with running_server(app) as url:
        report = asyncio.run(validate_url(url))
    assert statuses(report)["step"] == "warn" and report.ok
    assert "VALIDATION_ERROR" in detail(report, "step") and "Field(examples=" in detail(report, "step")


def test_nothing_listening_fails_at_health_with_exit_one() -> None:
    with ServedProcess("echo") as served:
        url = served.url
    done = envkit("validate", url, "--json")
    assert done.returncode == 1
    (check,) = json.loads(done.stdout)["checks"]
    assert check["name"] == "health" and check["status"] == "fail"
    assert "is the server running at this address?" in check["detail"]


# -- building actions from schemas ---------------------------------------------------------------


@pytest.mark.parametrize("schema, expected", [
    ({"type": "object", "properties": {"n": {"type": "integer", "minimum": 3, "maximum": 9}}, "required": ["n"]},
     {"n": 3}),
    ({"type": "object", "properties": {"n": {"type": "integer", "maximum": 0}}, "required": ["n"]}, {"n": 0}),
    ({"type": "object", "properties": {"x": {"type": "number", "exclusiveMinimum": 5}}, "required": ["x"]},
     {"x": 6.0}),
    ({"type": "object", "properties": {"word": {"type": "string", "minLength": 7}}, "required": ["word"]},
     {"word": "helloaa"}),
    ({"type": "object", "properties": {"word": {"type": "string", "maxLength": 2}}, "required": ["word"]},
     {"word": "he"}),
    ({"type": "object", "properties": {"d": {"enum": ["left", "right"]}, "m": {"type": "object"}}, "required": ["d"]},
     {"d": "left"}),
    ({"type": "object", "properties": {"o": {"anyOf": [{"type": "null"}, {"type": "boolean"}]}}, "required": ["o"]},
     {"o": False}),
    ({"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}, "required": ["p"],
      "$defs": {"P": {"type": "object", "properties": {"q": {"type": "integer"}}, "required": ["q"]}}},
     {"p": {"q": 1}}),
    ({"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "integer"}, "minItems": 2}},
      "required": ["xs"]}, {"xs": [1, 1]}),
    ({"type": "object", "examples": [{"guess": 50}], "properties": {"guess": {"type": "integer"}}}, {"guess": 50}),
])
def test_example_from_schema(schema: dict[str, Any], expected: Any) -> None:
    assert example_from_schema(schema) == expected
