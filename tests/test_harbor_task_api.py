"""OpenEnv 0.10.0's Harbor Task API (`/harbor_env/splits`, `num_tasks`, `task`, `task_range`), checked with OpenEnv's
own `HarborEnv` client in its venv (tests/openenv_peer/harbor_task_discovery.py) and against `openenv harbor serve`
on the same Harbor task folder.

On envkit's side the folder is served by `envkit serve FOLDER` (`envkit.harbor`). `openenv harbor serve` runs for real (`--expose direct`, no engine: discovery needs none), with its capture proxy,
which OpenEnv binds to every interface, moved to 127.0.0.1 (tests/openenv_peer/loopback_only.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from envkit import Environment, Observation, State
from envkit.app.targets import app_from_environment, resolve_target
from envkit.environment import Action
from envkit.core.task_refs import INSTRUCTION_CHARS
from envkit.testing import ServedProcess, free_port, running_server

PEER = Path(__file__).resolve().parent / "openenv_peer" / "harbor_task_discovery.py"
LONG_INSTRUCTION = "Count every line of /app/data.txt and write the number to /app/answer.txt.\n" * 80
#: Harbor task folders (name, instruction), written out of their names' order: both servers list them sorted.
TASKS = (("write-greeting", "Write `hello` to /app/greeting.txt.\n"), ("count-lines", LONG_INSTRUCTION),
         ("add-numbers", "  Add 2 and 3 and write the sum to /app/sum.txt.  \n"))


def discover(openenv_python: str, url: str) -> dict[str, Any]:
    done = subprocess.run([openenv_python, str(PEER), url], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


# -- a bundled environment, served by `envkit serve` ------------------------------------------------------------------

def test_harbor_client_discovers_the_tasks_of_envkit_serve_wordle(openenv_python: str) -> None:
    WordleEnvironment = resolve_target("wordle").env_class
    with ServedProcess("wordle") as served:
        seen = discover(openenv_python, served.url)
    splits = WordleEnvironment.splits()
    assert seen["splits"] == [{"name": s, "num_tasks": len(WordleEnvironment.tasks(s))} for s in splits]
    assert seen["default_num_tasks"] == len(WordleEnvironment.tasks(splits[0]))   # "" is the first split
    for split in splits:
        tasks = WordleEnvironment.tasks(split)
        listed = seen["by_split"][split]
        expected = [{"index": i, "task_id": json.dumps(task, separators=(",", ":")), "task_name": f"{split}-{i}",
                     "dataset": split, "instruction": ""} for i, task in enumerate(tasks)]
        assert listed["num_tasks"] == len(tasks)
        assert (listed["first"], listed["last"]) == (expected[0], expected[-1])
        assert listed["head"] == expected[:3] and listed["tail"] == expected[-2:]
    unknown, out_of_range = seen["refusals"]["unknown_split"], seen["refusals"]["index_out_of_range"]
    assert unknown["status"] == 400 and "unknown split 'no-such-split'" in unknown["body"]["detail"]
    assert "'train', 'test'" in unknown["body"]["detail"]
    assert out_of_range["status"] == 400 and "105 tasks, indices 0 to 104" in out_of_range["body"]["detail"]


def test_task_api_sits_behind_the_api_key_like_every_surface() -> None:
    with ServedProcess("echo", env={"ENVKIT_API_KEY": "sesame"}) as served:
        refused = httpx.get(served.url + "/harbor_env/splits")
        allowed = httpx.get(served.url + "/harbor_env/splits", headers={"X-API-Key": "sesame"})
        task = httpx.post(served.url + "/harbor_env/task", json={"split": "test", "index": 0},
                          headers={"Authorization": "Bearer sesame"})
    assert refused.status_code == 401
    assert allowed.status_code == 200 and [s["name"] for s in allowed.json()] == ["train", "test"]
    assert task.json()["task"]["instruction"].startswith("Echo this message back")   # echo's task_prompt


def test_an_environment_without_splits_serves_no_task_api() -> None:
    with running_server(app_from_environment(NoTasks)) as url:
        answer = httpx.get(url + "/harbor_env/splits")
    assert answer.status_code == 404


def test_a_catalogue_that_raises_is_a_500_naming_the_error_and_the_server_carries_on() -> None:
    class BrokenInstructions(NoTasks):
        TASKS = {"test": ({"task_id": "only"},)}

        @classmethod
        def task_instruction(cls, task: dict[str, Any]) -> str:
            raise OSError("instruction.md is unreadable")

    with running_server(app_from_environment(BrokenInstructions)) as url:
        broken = httpx.post(url + "/harbor_env/task", json={"split": "test", "index": 0})
        counted = httpx.post(url + "/harbor_env/num_tasks", json={"split": "test"})
    assert broken.status_code == 500 and broken.json() == {"detail": "OSError: instruction.md is unreadable"}
    assert counted.json() == {"num_tasks": 1}


# -- a Harbor task folder: envkit and `openenv harbor serve` side by side --------------------------------------------

@pytest.fixture(scope="module")
def harbor_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of Harbor tasks (task.toml, instruction.md, environment/Dockerfile, tests/test.sh)."""
    root = tmp_path_factory.mktemp("harbor") / "tasks"
    for name, instruction in TASKS:
        task = root / name
        (task / "environment").mkdir(parents=True)
        (task / "tests").mkdir()
        (task / "task.toml").write_text('schema_version = "1.1"\n\n[agent]\ntimeout_sec = 60.0\n\n'
                                        "[verifier]\ntimeout_sec = 60.0\n")
        (task / "instruction.md").write_text(instruction)
        (task / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n")
        (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    return root


@pytest.fixture(scope="module")
def openenv_harbor_url(openenv_python: str, harbor_folder: Path) -> Iterator[str]:
    """`openenv harbor serve --dataset FOLDER` (OpenEnv 0.10.0's own server) on 127.0.0.1."""
    port = free_port()
    process = subprocess.Popen([openenv_python, str(PEER.parent / "loopback_only.py"), "harbor", "serve",
                                "--dataset", str(harbor_folder),
                                "--host", "127.0.0.1", "--port", str(port), "--capture-port", str(free_port()),
                                "--expose", "direct"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _answers(url + "/harbor_env/splits"):
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail("openenv harbor serve did not start:\n" + process.communicate()[1][-3000:])
            time.sleep(0.25)
        yield url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


@pytest.fixture(scope="module")
def envkit_harbor_url(harbor_folder: Path) -> Iterator[str]:
    """`envkit serve FOLDER`."""
    with ServedProcess(str(harbor_folder)) as served:
        yield served.url


def test_harbor_client_sees_the_same_tasks_on_envkit_and_openenv_harbor_serve(
        openenv_python: str, openenv_harbor_url: str, envkit_harbor_url: str, harbor_folder: Path) -> None:
    theirs, ours = discover(openenv_python, openenv_harbor_url), discover(openenv_python, envkit_harbor_url)
    # A split is OpenEnv's dataset spec (the folder's path) and envkit's split name; counts and order agree.
    assert [s["name"] for s in theirs["splits"]] == [str(harbor_folder)] and [s["name"] for s in ours["splits"]] == ["test"]
    assert [s["num_tasks"] for s in ours["splits"]] == [s["num_tasks"] for s in theirs["splits"]] == [len(TASKS)]
    assert ours["default_num_tasks"] == theirs["default_num_tasks"] == len(TASKS)
    (their_split,), (our_split,) = theirs["by_split"].values(), ours["by_split"].values()
    for view in ("first", "last", "head", "tail"):
        their_tasks, our_tasks = _listed(their_split[view]), _listed(our_split[view])
        assert [_comparable(task) for task in our_tasks] == [_comparable(task) for task in their_tasks], view
        # envkit names a task without its server-side path: the folder's name, the last part of OpenEnv's task_id
        assert [t["task_id"] for t in our_tasks] == [Path(t["task_id"]).name for t in their_tasks]
        assert {t["dataset"] for t in our_tasks} == {"test"}
    long = next(task for task in our_split["head"] if task["task_name"] == "count-lines")
    assert len(long["instruction"]) == INSTRUCTION_CHARS + 2 and long["instruction"].endswith("\n…")
    # an index out of range: the same status and shape; envkit's detail says what there is
    assert ours["refusals"]["index_out_of_range"]["status"] == theirs["refusals"]["index_out_of_range"]["status"] == 400
    assert theirs["refusals"]["index_out_of_range"]["body"] == {"detail": "Invalid task index"}
    assert "3 tasks, indices 0 to 2" in ours["refusals"]["index_out_of_range"]["body"]["detail"]
    # an unknown split: OpenEnv's server fails with a bare 500; envkit answers 400 naming its splits
    assert theirs["refusals"]["unknown_split"] == {"status": 500, "body": "Internal Server Error"}
    assert ours["refusals"]["unknown_split"]["status"] == 400
    assert "this server's splits are 'test'" in ours["refusals"]["unknown_split"]["body"]["detail"]


#: Requests OpenEnv's client never sends; each answered as OpenEnv's server answers it (status and FastAPI's body).
BAD_REQUESTS = [
    ("POST", "/harbor_env/task", b'{"split": ""}'),                           # a field missing
    ("POST", "/harbor_env/task", b'{"split": "", "index": "first"}'),         # not an integer
    ("POST", "/harbor_env/num_tasks", b'{"split": 3}'),                       # not a string
    ("POST", "/harbor_env/num_tasks", b'{"split": "", "limit": 1}'),          # a field the request has not
    ("POST", "/harbor_env/task_range", b'{"split": "", "start": "a"}'),
    ("POST", "/harbor_env/task", b"{not json"),
    ("POST", "/harbor_env/task", b"[0]"),                                     # JSON, not an object
    ("POST", "/harbor_env/task", b"null"),
    ("POST", "/harbor_env/task", b""),                                        # no body
    ("POST", "/harbor_env/task", b'{"split": "", "index": -1}'),              # out of range below
    ("GET", "/harbor_env/task", b""),                                         # the wrong method
    ("POST", "/harbor_env/splits", b""),
]
#: Requests both servers take as pydantic's lax mode does, with the same answer.
LAX_REQUESTS = [
    ("POST", "/harbor_env/task", b'{"split": "", "index": "1"}'),
    ("POST", "/harbor_env/task_range", b'{"split": "", "start": 2, "stop": 1}'),
    ("POST", "/harbor_env/task_range", b'{"split": "", "start": -1}'),
    ("POST", "/harbor_env/task_range", b'{"split": ""}'),
]


@pytest.mark.parametrize(("method", "path", "body"), BAD_REQUESTS, ids=lambda value: repr(value)[:40])
def test_bad_requests_are_refused_as_openenv_harbor_serve_refuses_them(
        openenv_harbor_url: str, envkit_harbor_url: str, method: str, path: str, body: bytes) -> None:
    theirs = httpx.request(method, openenv_harbor_url + path, content=body, headers={"content-type": "application/json"})
    ours = httpx.request(method, envkit_harbor_url + path, content=body, headers={"content-type": "application/json"})
    assert ours.status_code == theirs.status_code
    their_detail, our_detail = theirs.json()["detail"], ours.json()["detail"]
    if isinstance(their_detail, list):   # 422: FastAPI's items, the same problems at the same places
        assert [(item["type"], item["loc"], item["msg"]) for item in our_detail] == \
            [(item["type"], item["loc"], item["msg"]) for item in their_detail]
    else:
        assert isinstance(our_detail, str) and our_detail
    assert ours.headers.get("allow") == theirs.headers.get("allow")


@pytest.mark.parametrize(("method", "path", "body"), LAX_REQUESTS, ids=lambda value: repr(value)[:40])
def test_lax_requests_get_the_answer_openenv_harbor_serve_gives(
        openenv_harbor_url: str, envkit_harbor_url: str, method: str, path: str, body: bytes) -> None:
    theirs = httpx.request(method, openenv_harbor_url + path, content=body, headers={"content-type": "application/json"})
    ours = httpx.request(method, envkit_harbor_url + path, content=body, headers={"content-type": "application/json"})
    assert ours.status_code == theirs.status_code == 200
    their_tasks, our_tasks = _tasks_of(theirs.json()), _tasks_of(ours.json())
    assert [_comparable(t) for t in our_tasks] == [_comparable(t) for t in their_tasks]


def test_the_server_carries_on_after_bad_requests(envkit_harbor_url: str) -> None:
    with httpx.Client(base_url=envkit_harbor_url) as client:
        for method, path, body in BAD_REQUESTS:
            client.request(method, path, content=body)
        assert client.post("/harbor_env/num_tasks", json={"split": "test"}).json() == {"num_tasks": len(TASKS)}


# -- helpers --------------------------------------------------------------------------------------------------------

def _tasks_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return answer["tasks"] if "tasks" in answer else [answer["task"]]


def _listed(value: Any) -> list[dict[str, Any]]:
    return value if isinstance(value, list) else [value]


def _comparable(task: dict[str, Any]) -> tuple[Any, ...]:
    """What both servers must agree on: the index, the task's name and its instruction."""
    return task["index"], task["task_name"], task["instruction"]


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class NoTasks(Environment[Action, Observation, State]):
    """An environment with no task splits."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Observation:
        return Observation()

    def step(self, action: Action) -> Observation:
        return Observation(done=True)

    @property
    def state(self) -> State:
        return State()
