"""A first environment in one file, as a new user writes it from the README: what each surface and command tells
them. Real servers on 127.0.0.1 (in this process, or `envkit serve` in a subprocess), real subprocesses of the
installed console script for the commands."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from envkit import EnvClient
from envkit.app.targets import app_from_environment, resolve_target
from envkit.client.ors_client import OrsServer
from envkit.errors import AuthenticationError, EnvConnectionError, EnvError, ToolDefinitionError
from envkit.publish.validate import Report, validate_url
from envkit.testing import ServedProcess, running_server
from envkit.tools import tool_specs

ENVKIT = str(Path(sys.executable).with_name("envkit"))

#: Word problems with a calculator, one file; `{example}` is where an argument example may go.
MATH = '''
import ast
import operator
from typing import Annotated, Any, Literal

from pydantic import Field

from envkit import Action, Environment, Observation, State, tool

PROBLEMS = [("What is 6 times 7?", 42.0), ("What is 9 plus 10?", 19.0), ("What is 8 minus 3?", 5.0)]
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


class SubmitAction(Action):
    answer: float


class ProblemObservation(Observation):
    text: str = ""


def _value(node: Any) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left), _value(node.right))
    raise ValueError("only numbers and + - * are allowed")


class MathEnvironment(Environment[SubmitAction, ProblemObservation, State]):
    """Word problems: calculate, then submit the answer."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUN_INLINE = True
    EPISODE_LENGTH = 2
    TASKS = {"train": [{"problem": 0}, {"problem": 1}], "test": [{"problem": 2}]}

    def __init__(self) -> None:
        self.problem, self._state = 0, State()

    def reset(self, seed=None, episode_id=None, problem=None, **kwargs) -> ProblemObservation:
        self.problem = problem if problem is not None else (seed or 0) % len(PROBLEMS)
        self._state = State(episode_id=episode_id)
        return ProblemObservation(text=PROBLEMS[self.problem][0])

    def step(self, action: SubmitAction) -> ProblemObservation:
        self._state.step_count += 1
        right = action.answer == PROBLEMS[self.problem][1]
        return ProblemObservation(text="right" if right else "wrong", reward=float(right), done=True)

    @property
    def state(self) -> State:
        return self._state

    @tool
    def calculate(self, expression: {example}) -> str:
        """Work out an arithmetic expression.

        Args:
            expression: Numbers with + - and *.
        """
        return str(_value(ast.parse(expression, mode="eval").body))

    @tool
    def submit(self, answer: float) -> ProblemObservation:
        """Submit the final answer.

        Args:
            answer: The number.
        """
        return self.step(SubmitAction(answer=answer))
'''
PLAIN, EXAMPLE = "str", 'Annotated[str, Field(examples=["6 * 7"])]'
SOLVER = '''

def _solver(seed):
    def act(observation, task):
        if observation.get("text") in ("right", "wrong"):
            return None
        return "submit", {"answer": PROBLEMS[task["problem"]][1]}
    return act


TOOL_PLAYERS = {"solver": _solver}
'''
_modules = iter(range(1000))


def write_math(folder: Path, example: str = PLAIN, *, name: str = "mathenv", extra: str = "") -> Path:
    (folder / f"{name}.py").write_text(MATH.replace("{example}", example) + extra)
    return folder


def load_math(tmp_path: Path, example: str = PLAIN, *, refusal: str = "ValueError") -> Any:
    """The class, from a module of a name of its own (each variant imports separately); `refusal` is what
    `calculate` raises for what it cannot read."""
    name = f"mathenv_{next(_modules)}"
    write_math(tmp_path, example, name=name)
    path = tmp_path / f"{name}.py"
    path.write_text(path.read_text().replace('raise ValueError("only', f'raise {refusal}("only'))
    if str(tmp_path) not in sys.path:
        sys.path.append(str(tmp_path))
    return resolve_target(f"{name}:MathEnvironment")


@pytest.fixture
def math_url(tmp_path: Path) -> Iterator[str]:
    target = load_math(tmp_path)
    with running_server(app_from_environment(target.env_class, env_name="math")) as url:
        yield url


def envkit(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ENVKIT, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


def statuses(report: Report) -> dict[str, str]:
    return {check.name: check.status for check in report.checks}


def detail(report: Report, name: str) -> str:
    return next(check.detail for check in report.checks if check.name == name)


# -- validate URL ---------------------------------------------------------------------------------------------


def test_validate_url_judges_a_refusal_as_a_warning_on_every_surface(math_url: str) -> None:
    """`calculate("hello")` raises ValueError, the documented way to refuse a move: the env is valid."""
    report = asyncio.run(validate_url(math_url))
    found = statuses(report)
    assert report.ok, report.table()
    assert found["tool call"] == found["mcp (standard)"] == found["ors call"] == "warn", report.table()
    for name in ("tool call", "mcp (standard)", "ors call"):
        assert "ValueError: only numbers" in detail(report, name)
        assert "give it an example: `expression: Annotated[str, Field(examples=[...])]`" in detail(report, name)


def test_validate_url_fails_a_tool_that_raises_anything_else(tmp_path: Path) -> None:
    target = load_math(tmp_path, refusal="RuntimeError")
    with running_server(app_from_environment(target.env_class)) as url:
        report = asyncio.run(validate_url(url))
    assert not report.ok
    assert statuses(report)["tool call"] == statuses(report)["mcp (standard)"] == statuses(report)["ors call"] == "fail"


def test_an_argument_example_is_listed_and_validate_calls_with_it(tmp_path: Path) -> None:
    target = load_math(tmp_path, EXAMPLE)
    with running_server(app_from_environment(target.env_class)) as url:
        listed = httpx.get(url + "/tools", trust_env=False).json()
        report = asyncio.run(validate_url(url))
    calculate = next(one["function"] for one in (listed["tools"] if isinstance(listed, dict) else listed)
                     if one["function"]["name"] == "calculate")
    assert calculate["parameters"]["properties"]["expression"]["examples"] == ["6 * 7"]
    assert statuses(report)["tool call"] == "ok", report.table()
    assert "calculate({'expression': '6 * 7'}) → '42'" in detail(report, "tool call")
    assert statuses(report)["ors call"] == "ok" and "'6 * 7'" in detail(report, "mcp (standard)")


def test_a_refused_example_is_a_warning_with_nothing_to_fix(tmp_path: Path) -> None:
    """An anagram's legal word depends on the episode: its example may be refused, and that is no mistake."""
    target = load_math(tmp_path, 'Annotated[str, Field(examples=["6 / 7"])]')
    with running_server(app_from_environment(target.env_class)) as url:
        report = asyncio.run(validate_url(url))
    assert report.ok and statuses(report)["tool call"] == "warn"
    assert "made from the examples given, so a legal move depends on the episode: nothing to fix" in \
        detail(report, "tool call")


def test_a_refused_choice_among_allowed_values_is_hinted_as_a_literal(tmp_path: Path) -> None:
    """A Literal argument (a maze's direction): every value fits the schema, so the hint says which was sent and
    names the Literal, not `str`."""
    target = load_math(tmp_path, 'Literal["6 / 7", "6 * 7"]')
    with running_server(app_from_environment(target.env_class)) as url:
        report = asyncio.run(validate_url(url))
    assert report.ok and statuses(report)["tool call"] == "warn"
    assert "'6 / 7' was the first of expression's allowed values; to have one legal at the start sent, give it an " \
        "example: `expression: Annotated[Literal['6 / 7', '6 * 7'], Field(examples=[...])]`" in \
        detail(report, "tool call"), report.table()


def test_an_argument_with_examples_binds_to_the_trainer(tmp_path: Path) -> None:
    """The schema transformers builds for the bound method has no examples; they must not count as a mismatch."""
    from envkit.play.binding import bind, tool_names

    target = load_math(tmp_path, EXAMPLE)
    with running_server(app_from_environment(target.env_class)) as url:
        assert set(tool_names(bind(url, name="math", check_schemas=True))) == {"calculate", "submit"}


def test_a_trainers_dataset_columns_that_reset_does_not_take_stay_in_the_dataset(math_url: str) -> None:
    """TRL gives `reset` every column of a row (an ORS dataset's `task_index`, say); the binding passes on the names
    `/metadata` says reset takes, where a client naming one of the others directly is refused."""
    from envkit.play.binding import bind

    environment = bind(math_url, name="math")()
    assert "What is 9 plus 10?" in environment.reset(prompt="Solve it.", problem=1, task_index=7, split="train")
    assert environment.episode.row == {"problem": 1}
    assert httpx.get(math_url + "/metadata", trust_env=False).json()["reset_arguments"] == [
        "episode_id", "problem", "seed"]


def test_an_args_line_for_an_argument_the_tool_does_not_take_is_named(tmp_path: Path) -> None:
    source = write_math(tmp_path, name=f"mathenv_{next(_modules)}")
    path = next(source.glob("mathenv_*.py"))
    path.write_text(path.read_text().replace("            expression: Numbers with + - and *.\n",
                                             "            expression: Numbers with + - and *.\n"
                                             "            expr: The same.\n"))
    sys.path.append(str(tmp_path))
    with pytest.raises(ToolDefinitionError, match=r"calculate: the docstring describes `expr` under `Args:`, which the "
                                                  r"tool does not take \(it takes expression\)"):
        tool_specs(resolve_target(f"{path.stem}:MathEnvironment").env_class)


# -- a client at a wrong path ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/web", "/foo", "/web/"])
def test_a_client_at_a_wrong_path_is_told_the_path_and_the_right_one(math_url: str, path: str) -> None:
    with pytest.raises(EnvConnectionError) as refused:
        EnvClient(math_url + path).sync().__enter__()
    assert not isinstance(refused.value, AuthenticationError)
    message = str(refused.value)
    assert "HTTP 404" in message and f"no WebSocket endpoint at {path.rstrip('/')}/ws" in message
    assert "sessions are at /ws" in message and "root URL" in message
    with EnvClient(math_url).sync() as env:   # and the root URL works
        assert env.reset(problem=0).observation["text"] == "What is 6 times 7?"


# -- types and reset arguments, the same on every surface --------------------------------------------------------


@pytest.mark.parametrize("answer", ["42", True, None, [42]])
def test_a_tool_argument_of_the_wrong_json_type_is_refused_on_every_surface(math_url: str, answer: Any) -> None:
    """Strict: a string is never read as a number, nor a boolean as one; an integer passes for a number."""
    with EnvClient(math_url).sync() as env:
        env.reset(problem=0)
        with pytest.raises(EnvError) as refused:
            env.call("submit", answer=answer)
        assert refused.value.code == "VALIDATION_ERROR" and "answer: Input should be a valid number" in str(refused.value)
        assert env.call("submit", answer=42).reward == 1.0
    rpc = _mcp(math_url, "reset", {"problem": 0})
    episode = rpc["result"]["structuredContent"]["episode_id"]
    reply = _mcp(math_url, "submit", {"answer": answer, "episode_id": episode})
    assert "answer: Input should be a valid number" in str(reply.get("error") or reply["result"])
    assert _mcp(math_url, "submit", {"answer": 42, "episode_id": episode})["result"]["structuredContent"]["reward"] == 1.0
    server = OrsServer(math_url)
    try:
        session = server.open(split="test", index=0)
        with pytest.raises(EnvError) as refused:
            session.call("submit", {"answer": answer})
        assert refused.value.code == "INPUT_VALIDATION" and "valid number" in str(refused.value)
        assert session.call("submit", {"answer": 5}).reward == 1.0
        session.close()
    finally:
        server.close()


def _mcp(url: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    return httpx.post(url + "/mcp", json=body, headers={"Accept": "application/json, text/event-stream"},
                      trust_env=False).json()


def test_a_misspelled_reset_argument_is_refused_on_every_surface(math_url: str) -> None:
    expected = ("Invalid reset: MathEnvironment.reset() takes no argument 'problme' (did you mean 'problem'?); it "
                "takes episode_id, problem, seed")
    with EnvClient(math_url).sync() as env:
        with pytest.raises(EnvError) as refused:
            env.reset(problme=2)
        assert refused.value.code == "VALIDATION_ERROR" and refused.value.message == expected
        assert env.reset(problem=2).observation["text"] == "What is 8 minus 3?"   # the session carries on
    assert expected in str(_mcp(math_url, "reset", {"problme": 2})["result"]["content"])
    server = OrsServer(math_url)
    try:
        with pytest.raises(EnvError) as refused:
            server.open(task_spec={"problme": 2})
        assert refused.value.code == "INPUT_VALIDATION" and expected in str(refused.value)
    finally:
        server.close()


@pytest.mark.parametrize("fields, message", [({"episode_id": 7}, "episode_id must be a string or null, got 7"),
                                             ({"seed": "one"}, "seed must be an integer or null, got 'one'"),
                                             ({"seed": True}, "seed must be an integer or null, got True")])
def test_resets_own_fields_are_checked_and_state_keeps_working(fields: dict[str, Any], message: str) -> None:
    """Echo took a non-string episode_id at reset, and every later `state` then failed."""
    target = resolve_target("echo")
    with running_server(app_from_environment(target.env_class, env_name="echo")) as url, \
            EnvClient(url).sync() as env:
        with pytest.raises(EnvError) as refused:
            env.reset(**fields)
        assert refused.value.code == "VALIDATION_ERROR" and message in refused.value.message
        env.reset(episode_id="e1", seed=3)
        assert env.state()["episode_id"] == "e1"


def test_a_reset_taking_kwargs_and_no_tasks_takes_any_name() -> None:
    from sample_envs import CounterAction, CounterEnvironment, CounterObservation

    from envkit import create_app

    with running_server(create_app(CounterEnvironment, CounterAction, CounterObservation)) as url, \
            EnvClient(url).sync() as env:
        assert env.reset(tag="t", anything="goes").observation["tag"] == "t"


# -- the commands ------------------------------------------------------------------------------------------------


def test_an_import_error_names_the_users_line_and_debug_shows_the_traceback(tmp_path: Path) -> None:
    (tmp_path / "problems.jsonl").write_text('{"q": 1}\n{bad line\n')
    (tmp_path / "loader.py").write_text("import json\nfrom pathlib import Path\n\n\ndef load(path):\n"
                                        "    return [json.loads(line) for line in Path(path).read_text().splitlines()]\n")
    (tmp_path / "mathenv.py").write_text("import loader\n\nPROBLEMS = loader.load('problems.jsonl')\n")
    done = envkit("validate", "mathenv:MathEnvironment", cwd=tmp_path)
    assert done.returncode == 1
    assert f"({tmp_path / 'loader.py'}, line 6: return [json.loads(line)" in done.stdout, done.stdout
    assert "raised in " in done.stdout and "json/decoder.py" in done.stdout
    done = envkit("serve", "mathenv:MathEnvironment", "--port", "0", "--log-level", "debug", cwd=tmp_path)
    assert done.returncode == 2
    assert "Traceback (most recent call last)" in done.stderr and f'File "{tmp_path / "loader.py"}", line 6' in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("envkit serve: error: cannot import 'mathenv'")
    done = envkit("serve", "mathenv:MathEnvironment", "--port", "0", cwd=tmp_path)
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_file_path_target_is_accepted_by_validate_serve_and_eval(tmp_path: Path) -> None:
    write_math(tmp_path, extra=SOLVER)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = envkit("validate", "../mathenv.py:MathEnvironment", cwd=elsewhere)
    assert done.returncode == 0 and "valid (" in done.stdout, done.stdout + done.stderr
    done = envkit("eval", "--env", "./mathenv.py:MathEnvironment", "--policy", "solver", "--policy", "random",
                  cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "policy:solver         1     1/1 100%" in " ".join(done.stdout.split()) or "1/1 100%" in done.stdout
    with ServedProcess(str(tmp_path / "mathenv.py") + ":MathEnvironment") as served:
        with EnvClient(served.url).sync() as env:
            assert env.reset(problem=1).observation["text"] == "What is 9 plus 10?"


def test_a_module_named_like_the_standard_library_is_named_as_such(tmp_path: Path) -> None:
    write_math(tmp_path, name="math")
    for target in ("math:MathEnvironment", "./math.py:MathEnvironment"):
        done = envkit("validate", target, cwd=tmp_path)
        assert done.returncode == 1
        assert f"{tmp_path / 'math.py'} has the name of the standard library's 'math' module" in done.stdout
        assert "rename it (e.g. math_env.py)" in done.stdout
    done = envkit("serve", "math:MathEnvironment", "--port", "0", cwd=tmp_path)
    assert done.returncode == 2 and "standard library's 'math' module" in done.stderr


def test_eval_against_a_server_needs_no_env_name(math_url: str, tmp_path: Path) -> None:
    done = envkit("eval", "--env-url", math_url, "--policy", "random", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "policy:random" in done.stdout and "math" in done.stdout.splitlines()[0]
    done = envkit("eval", "--env-url", math_url, "--policy", "random", "--split", "train", "--json", cwd=tmp_path)
    assert done.returncode == 0 and '"episodes": 2' in done.stdout, done.stdout + done.stderr
    done = envkit("eval", "--env-url", math_url, "--policy", "random", "--split", "dev", cwd=tmp_path)
    assert done.returncode == 2 and "has no split 'dev'; its splits: train, test" in done.stderr


def test_training_a_tiny_model_without_a_scripted_player_says_what_to_do_before_step_one(tmp_path: Path) -> None:
    """Also: an argument with examples binds to the trainer (transformers' schema has no examples to compare)."""
    write_math(tmp_path, EXAMPLE)
    done = envkit("train", "--env", "./mathenv.py:MathEnvironment", "--max-steps", "1", "--output-dir", "run",
                  cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    output = done.stdout + done.stderr
    warning = ('warning: the tiny model warmed up on MathEnvironment with random tool calls only, and none earned a '
               'reward')
    assert warning in output, output
    assert 'TOOL_PLAYERS = {"solver": ...} in mathenv.py, beside MathEnvironment' in output
    assert output.index(warning) < output.index("step    1/1")


# -- task_prompt, however it is written ------------------------------------------------------------------------

PROMPTS = {
    "plain": "    def task_prompt(self, task):\n        return PROBLEMS[task['problem']][0]\n",
    "classmethod": "    @classmethod\n    def task_prompt(cls, task):\n        return PROBLEMS[task['problem']][0]\n",
    "staticmethod": "    @staticmethod\n    def task_prompt(task):\n        return PROBLEMS[task['problem']][0]\n",
}


def load_with_prompt(tmp_path: Path, method: str) -> Any:
    """The math env with `method` added to its class (its own module, so each variant imports separately)."""
    target = load_math(tmp_path)
    path = Path(sys.modules[target.env_class.__module__].__file__ or "")
    name = f"{path.stem}_{next(_modules)}"
    (tmp_path / f"{name}.py").write_text(path.read_text().replace(
        "    def __init__(self) -> None:", method + "\n    def __init__(self) -> None:"))
    return resolve_target(f"{name}:MathEnvironment")


@pytest.mark.parametrize("form", sorted(PROMPTS))
def test_task_prompt_works_as_a_plain_method_a_classmethod_or_a_staticmethod(tmp_path: Path, form: str) -> None:
    """Servers call task_prompt on the class, before any instance exists: every form an author may write answers,
    and the folder check and the server's checks agree (no knock-on failure in the ORS refusals check)."""
    from envkit.publish.validate import validate_class

    target = load_with_prompt(tmp_path, PROMPTS[form])
    assert target.env_class.task_prompt({"problem": 1}) == "What is 9 plus 10?"
    module = target.env_class.__module__
    assert statuses(validate_class(f"{module}:MathEnvironment"))["tasks"] == "ok"
    with running_server(app_from_environment(target.env_class, env_name="math")) as url:
        report = asyncio.run(validate_url(url))
    assert report.ok, report.table()
    assert statuses(report)["ors session"] == statuses(report)["ors refusals"] == "ok", report.table()


def test_a_task_prompt_that_needs_an_instance_fails_the_folder_check_with_the_reason(tmp_path: Path) -> None:
    from envkit.publish.validate import validate_class

    target = load_with_prompt(tmp_path, "    def task_prompt(self, task):\n        return self.problem_text\n")
    report = validate_class(f"{target.env_class.__module__}:MathEnvironment")
    assert statuses(report)["tasks"] == "fail"
    assert "called on the class, before a session opens" in detail(report, "tasks")


def test_a_session_that_cannot_open_leaves_the_ors_refusals_check_alone(tmp_path: Path) -> None:
    """A task_prompt that raises fails `ors session`; the refusals check does not fail again for it."""
    target = load_with_prompt(tmp_path, "    @classmethod\n    def task_prompt(cls, task):\n"
                                        "        raise RuntimeError('no prompt today')\n")
    with running_server(app_from_environment(target.env_class, env_name="math")) as url:
        report = asyncio.run(validate_url(url))
    assert statuses(report)["ors session"] == "fail" and "no prompt today" in detail(report, "ors session")
    assert statuses(report)["ors refusals"] == "ok", report.table()
    assert "see ors session" in detail(report, "ors refusals")


# -- the server's faults, told apart from the author's -----------------------------------------------------------

SANDBOXED = '''
from typing import Annotated

from pydantic import Field

from envkit import Action, Environment, Observation, State, tool
from envkit.sandbox import open_sandbox


class RunAction(Action):
    command: str = Field(examples=["ls"])


class RunObservation(Observation):
    output: str = ""


class ShellEnvironment(Environment[RunAction, RunObservation, State]):
    """A shell in a sandbox per session."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    TASKS = {"test": [{}]}

    def __init__(self) -> None:
        self.box = None

    def reset(self, seed=None, episode_id=None, **kwargs) -> RunObservation:
        return RunObservation(output="ready")

    def step(self, action: RunAction) -> RunObservation:
        if self.box is None:
            self.box = open_sandbox()
        return RunObservation(output=self.box.run(action.command).stdout)

    @property
    def state(self) -> State:
        return State()

    @tool
    def run(self, command: Annotated[str, Field(examples=["ls"])]) -> RunObservation:
        """Run a shell command.

        Args:
            command: The command line.
        """
        return self.step(RunAction(command=command))
'''


def test_validate_url_says_a_missing_sandbox_backend_is_the_servers_fault(tmp_path: Path) -> None:
    """The server (a real `envkit serve`) has only the docker backend, and no engine answers at its DOCKER_HOST:
    every check that opens a sandbox says the server is at fault, and none blames the examples."""
    (tmp_path / "shellenv.py").write_text(SANDBOXED)
    environment = {"ENVKIT_SANDBOX": "docker", "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock",
                   "PYTHONPATH": str(tmp_path)}
    with ServedProcess("shellenv:ShellEnvironment", "--max-concurrent-envs", "4", env=environment) as served:
        report = asyncio.run(validate_url(served.url))
    failed = [check for check in report.checks if check.status == "fail"]
    assert {check.name for check in failed} >= {"step", "tool call"}, report.table()
    for check in failed:
        assert check.detail.startswith("the server's fault, not the environment's code or examples: it cannot "
                                       "open a sandbox"), report.table()
        assert "nothing to fix" not in check.detail and "give it an example" not in check.detail


# -- what the model reads first ----------------------------------------------------------------------------------


def ors_prompt(env_class: Any) -> str:
    with running_server(app_from_environment(env_class, env_name="math")) as url:
        server = OrsServer(url)
        try:
            session = server.open(split="test", index=0)
            session.close()
        finally:
            server.close()
    return session.prompt


@pytest.mark.parametrize(("prompt", "observation", "expected"), [
    ("'Submit the answer.'", "PROBLEMS[self.problem][0]", "Submit the answer.\n\nWhat is 8 minus 3?"),
    ("PROBLEMS[task['problem']][0]", "'Question: ' + PROBLEMS[self.problem][0] + ' Use the tools.'",
     "Question: What is 8 minus 3? Use the tools."),
])
def test_the_task_prompt_comes_first_and_is_never_said_twice(tmp_path: Path, prompt: str, observation: str,
                                                              expected: str) -> None:
    """The rule (`envkit.opening_text`): the task's prompt, a blank line, the first observation; the prompt left out
    where the observation already says it. The ORS prompt and an eval's first message end the same way."""
    from envkit.evaluate import EvalSettings, evaluate

    target = load_with_prompt(tmp_path, f"    @classmethod\n    def task_prompt(cls, task):\n        return {prompt}\n")
    path = Path(sys.modules[target.env_class.__module__].__file__ or "")
    path.write_text(path.read_text().replace("text=PROBLEMS[self.problem][0]", f"text={observation}"))
    sys.modules.pop(path.stem)
    written = resolve_target(f"{path.stem}:MathEnvironment")
    assert ors_prompt(written.env_class) == expected
    evaluation = evaluate(EvalSettings(env=[f"{path.stem}:MathEnvironment"], policies=["random"], games=1),
                          say=lambda _: None)
    first = evaluation.transcripts[0].messages[0]["content"]
    assert first.endswith("\n\n" + expected) and first.count("What is 8 minus 3?") == 1, first


def test_training_reads_the_task_prompt_first_as_eval_does(tmp_path: Path) -> None:
    """`envkit train`'s episodes start as eval's games do: the task's prompt, then the first observation."""
    target = load_with_prompt(tmp_path, "    def task_prompt(self, task):\n        return 'Submit the answer.'\n")
    path = Path(sys.modules[target.env_class.__module__].__file__ or "")
    done = envkit("train", "--env", f"./{path.name}:MathEnvironment", "--max-steps", "1", "--output-dir", "run",
                  cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    first = json.loads((tmp_path / "run" / "transcripts.jsonl").read_text().splitlines()[0])["messages"][0]
    assert first["content"].endswith("\n\nSubmit the answer.\n\nWhat is 6 times 7?") or \
        first["content"].endswith("\n\nSubmit the answer.\n\nWhat is 9 plus 10?"), first


def test_a_transcript_marks_the_tool_message_that_ended_the_episode(math_url: str) -> None:
    """A player that goes on calling after the end (as a small model does): the call that ended the episode is
    marked, the refused ones after it are not."""
    from envkit.play.binding import bind
    from envkit.play.games import play_and_score, split_games

    class Persistent:
        label = "persistent"

        def respond(self, conversations: Any) -> list[dict[str, Any]]:
            call = {"type": "function", "function": {"name": "submit", "arguments": {"answer": 5.0}}}
            return [{"role": "assistant", "content": "", "tool_calls": [call]} for _ in conversations]

    classes = {"math": bind(math_url, name="math")}
    games = split_games("math", None, "test", 1, "Solve it.\n\n", OrsServer(math_url))
    _, (transcript,) = play_and_score(Persistent(), games, classes, {}, max_tool_calling_iterations=3)
    answers = [message for message in transcript.messages if message["role"] == "tool"]
    assert [message.get("ended_episode", False) for message in answers] == [True, False, False], answers
    assert transcript.to_json()["messages"][2]["ended_episode"] is True
