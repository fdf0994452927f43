"""Harbor task folders served by envkit, on the real Docker engine: each session in its task's container, the
task's own tests deciding the reward, and every session promise kept (capacity, reaping, SessionLostError when the
container dies, nothing left after close or a server kill)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from harbor_helpers import (CHECK_HELLO, REWARD, make_task, no_warm_pool, require_engine, task_container_starts,
                            task_containers)
from scripted_model import ScriptedModel, text_reply, tool_reply

from envkit import CapacityError, EnvClient, SessionLostError
from envkit.agents import reference_command, run_agent
from envkit.app.targets import app_from_environment
from envkit.harbor import HarborTaskError, ImageBuildError, find_tasks, harbor_environment, load_task
from envkit.harbor.images import task_image
from envkit.testing import ServedProcess, running_server

__all__ = ["no_warm_pool"]   # a fixture the tests below use by name

PARTS = ('python3 - <<"EOF"\nimport json, os\nok = os.path.exists("/app/a.txt"), os.path.exists("/app/b.txt")\n'
         'json.dump({"reward": sum(ok) / 2, "has_a": int(ok[0]), "has_b": int(ok[1])}, '
         'open("/logs/verifier/reward.json", "w"))\nEOF')


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of four small tasks, their images built once for the module."""
    require_engine()
    root = tmp_path_factory.mktemp("harbor") / "tasks"
    make_task(root / "hello", solve="echo hello > /app/hello.txt", test=CHECK_HELLO)
    make_task(root / "parts", solve="touch /app/a.txt /app/b.txt", test=PARTS,
              instruction="Create /app/a.txt and /app/b.txt.")
    make_task(root / "slow", solve="true", test=f"sleep 30; echo 1 > {REWARD}", verifier_timeout_s=2,
              instruction="Nothing to do.")
    make_task(root / "online", solve="true", test=f"echo 1 > {REWARD}",
              toml='[environment]\nnetwork_mode = "public"\n', instruction="Nothing to do.")
    for split in find_tasks(root).values():
        for task in split:
            task_image(task)
    return root


@pytest.fixture
def env(tasks: Path, no_warm_pool: None) -> Iterator[EnvClient]:
    app = app_from_environment(harbor_environment(tasks), max_concurrent_envs=2, session_timeout_s=300.0)
    with running_server(app) as url, EnvClient(url).sync() as client:
        yield client


def test_the_folder_reads_as_splits_of_tasks(tasks: Path, tmp_path: Path) -> None:
    assert {split: [task.name for task in found] for split, found in find_tasks(tasks).items()} == \
        {"test": ["hello", "online", "parts", "slow"]}
    assert [task.name for task in find_tasks(tasks / "hello")["test"]] == ["hello"]
    (tmp_path / "train").mkdir()
    (tmp_path / "test").mkdir()
    make_task(tmp_path / "train" / "one", solve="true", test="true")
    make_task(tmp_path / "test" / "two", solve="true", test="true")
    assert {split: [task.name for task in found] for split, found in find_tasks(tmp_path).items()} == \
        {"test": ["two"], "train": ["one"]}
    task = load_task(tasks / "slow")
    assert (task.agent_timeout_s, task.verifier_timeout_s, task.network) == (60.0, 2.0, False)
    assert load_task(tasks / "online").network is True


def test_an_episode_runs_commands_and_files_in_the_container_and_the_tests_score_it(env: EnvClient) -> None:
    first = env.reset(task_id="hello")
    assert first.text == "Write hello to /app/hello.txt.\n"
    ran = env.call("run_command", command="pwd; whoami; echo hi >&2; exit 3")
    assert ran.observation["exit_code"] == 3 and ran.text.splitlines()[:3] == ["/app", "root", "hi"]
    env.call("write_file", path="hello.txt", content="hello\n")
    assert env.call("read_file", path="/app/hello.txt").text == "hello"
    assert env.call("read_file", path="/etc/hostname").text == "task"
    done = env.call("submit")
    assert (done.reward, done.done, done.metrics["solved"]) == (1.0, True, 1)
    assert "reward 1" in done.text


def test_reward_json_keys_are_components_and_metrics(env: EnvClient) -> None:
    env.reset(task_id="parts")
    env.call("run_command", command="touch /app/a.txt")
    done = env.call("submit")
    assert done.reward == 0.5
    assert done.observation["reward_components"] == {"reward": 0.5, "has_a": 1.0, "has_b": 0.0}
    assert (done.metrics["has_a"], done.metrics["has_b"], done.metrics["solved"]) == (1.0, 0.0, 0)


def test_the_agent_cannot_write_its_own_reward_nor_see_the_tests(env: EnvClient) -> None:
    """Stale reward files are removed before the tests run, and /tests arrives only then."""
    env.reset(task_id="hello")
    seen = env.call("run_command", command="ls /tests 2>&1; mkdir -p /logs/verifier; cd /logs/verifier; "
                    "echo 1 > reward.txt; echo '{\"reward\": 1}' > reward.json")
    assert "No such file or directory" in seen.text
    assert env.call("submit").reward == 0.0


def test_tests_past_their_timeout_score_zero_and_say_why(env: EnvClient) -> None:
    env.reset(task_id="slow")
    started = time.monotonic()
    done = env.call("submit")
    assert done.reward == 0.0 and "[verifier].timeout_sec = 2 s" in done.text
    assert time.monotonic() - started < 20


def test_the_network_follows_task_toml_and_is_none_by_default(env: EnvClient) -> None:
    env.reset(task_id="hello")
    assert env.call("run_command", command="ls /sys/class/net").text.split()[:1] == ["lo"]
    assert "eth0" not in env.call("run_command", command="ls /sys/class/net").text
    env.reset(task_id="online")
    assert "eth0" in env.call("run_command", command="ls /sys/class/net").text


def test_a_dead_container_loses_the_session_and_the_server_carries_on(tasks: Path, no_warm_pool: None) -> None:
    app = app_from_environment(harbor_environment(tasks), max_concurrent_envs=2)
    with running_server(app) as url:
        with EnvClient(url).sync() as client:
            client.reset(task_id="hello")
            (name,) = task_containers(_this_pid())
            subprocess.run(["docker", "kill", name], capture_output=True, check=True)
            with pytest.raises(SessionLostError, match="environment lost"):
                client.call("run_command", command="echo still here")
            with pytest.raises(SessionLostError):
                client.call("run_command", command="echo still here")
        with EnvClient(url).sync() as other:
            other.reset(task_id="hello")
            assert other.call("run_command", command="echo fine").text.startswith("fine")


def test_capacity_reaping_and_close_leave_no_container(tasks: Path, no_warm_pool: None) -> None:
    app = app_from_environment(harbor_environment(tasks), max_concurrent_envs=1, session_timeout_s=3.0)
    with running_server(app) as url:
        with EnvClient(url).sync() as client:
            client.reset(task_id="hello")
            assert len(task_containers(_this_pid())) == 1
            with pytest.raises(CapacityError):
                with EnvClient(url).sync() as second:
                    second.reset(task_id="hello")
        assert _settled(_this_pid()) == [], "after close"
        with EnvClient(url).sync() as idle:
            idle.reset(task_id="hello")
            assert _settled(_this_pid(), timeout_s=20) == [], "after the idle reap"
            with pytest.raises(SessionLostError):
                idle.call("run_command", command="true")


def test_a_killed_server_leaves_no_container(tasks: Path) -> None:
    with ServedProcess(str(tasks), env={"ENVKIT_SANDBOX_WARM": "2"}) as served:
        with EnvClient(served.url).sync() as client:
            client.reset(task_id="hello")
            client.call("run_command", command="sleep 600 &")
            assert len(_settled(served.process.pid, want=3)) == 3   # the session's and two warm ones
            assert len(_channels(served.process.pid)) == 3          # each with a channel folder of its own
            served.kill()
    assert _settled(served.process.pid) == []
    # A killed server cannot remove its channel folders; the next process that makes one does.
    subprocess.run([sys.executable, "-c", "from envkit.sandbox import open_sandbox; "
                    "open_sandbox('docker', image='python:3.11-slim', channel_dir=True).close()"],
                   check=True, timeout=120)
    assert _channels(served.process.pid) == []


def _channels(server_pid: int) -> list[Path]:
    """The channel folders of the sandboxes of the server with pid `server_pid`."""
    return list(Path(tempfile.gettempdir()).glob(f"envkit-channel-*.*.{server_pid}.*-*"))


def test_eval_oracle_scores_one_and_doing_nothing_zero(tasks: Path, tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.mkdir()
    for name in ("hello", "parts"):
        subprocess.run(["cp", "-r", str(tasks / name), str(good / name)], check=True)
    scores = {}
    for policy in ("oracle", "nothing"):
        done = subprocess.run([sys.executable, "-m", "envkit.cli", "eval", "--env", str(good), "--policy", policy,
                               "--json", "--transcripts", str(tmp_path / f"{policy}.jsonl")],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        (row,) = json.loads(done.stdout[done.stdout.index("{"):])["rows"]
        scores[policy] = (row["episodes"], row["mean_reward"])
        assert len((tmp_path / f"{policy}.jsonl").read_text().splitlines()) == 2
    assert scores == {"oracle": (2, 1.0), "nothing": (2, 0.0)}


@pytest.mark.parametrize(("change", "message"), [
    (lambda task: (task / "tests" / "test.sh").unlink(), "it has no tests/test.sh"),
    (lambda task: (task / "task.toml").write_text("[agent\n"), "task.toml: invalid TOML"),
    (lambda task: (task / "task.toml").write_text('[environment]\nnetwork_mode = "allowlist"\n'),
     "cannot be enforced"),
    (lambda task: (task / "task.toml").write_text("[verifier]\ntimeout_sec = -1\n"),
     "[verifier].timeout_sec must be a positive number"),
    (lambda task: (task / "task.toml").write_text('[environment]\nstorage = "10 gigabytes"\n'),
     "[environment].storage must be a size like"),
    (lambda task: (task / "task.toml").write_text('[environment]\nmemory = "2G"\nmemory_mb = 4096\n'),
     "is 2048 MB but memory_mb is 4096"),
])
def test_a_broken_task_folder_is_one_line(tmp_path: Path, change: object, message: str) -> None:
    task = make_task(tmp_path / "tasks" / "bad", solve="true", test="true")
    change(task)  # type: ignore[operator]
    done = subprocess.run([sys.executable, "-m", "envkit.cli", "serve", str(tmp_path / "tasks"), "--port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert message in done.stderr and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    with pytest.raises(HarborTaskError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_task(task)


@pytest.mark.parametrize(("lines", "memory_mb", "storage_mb"), [
    ('storage = "10G"', 2048, 10240), ('memory = "512M"\nstorage = "1.5G"', 512, 1536),
    ('memory = "4g"\nmemory_mb = 4096', 4096, 1024), ("memory_mb = 1024\nstorage_mb = 2048", 1024, 2048),
])
def test_the_older_size_fields_read_as_harbor_reads_them(tmp_path: Path, lines: str, memory_mb: int,
                                                         storage_mb: int) -> None:
    """harbor 0.25 still reads `memory` and `storage` as sizes ("10G" is 10,240 MB) where `*_mb` is not given."""
    task = make_task(tmp_path / "sized", solve="true", test="true", toml=f"[environment]\n{lines}\n")
    loaded = load_task(task)
    assert (loaded.memory_mb, loaded.storage_mb) == (memory_mb, storage_mb)


def test_images_are_cached_by_content_and_a_failed_build_names_its_log(tasks: Path, tmp_path: Path) -> None:
    task = load_task(tasks / "hello")
    started = time.monotonic()
    assert task_image(task)[0] == task.image_tag()
    assert time.monotonic() - started < 5    # built by the fixture: not again
    copy = tmp_path / "hello"
    subprocess.run(["cp", "-r", str(tasks / "hello"), str(copy)], check=True)
    assert load_task(copy).image_tag() == task.image_tag()
    (copy / "environment" / "data.txt").write_text("changed")
    assert load_task(copy).image_tag() != task.image_tag()
    broken = make_task(tmp_path / "broken", solve="true", test="true",
                       dockerfile="FROM python:3.11-slim\nRUN echo about to fail && false\n")
    stopped = _stopped_build_steps()
    with pytest.raises(ImageBuildError) as raised:
        task_image(load_task(broken))
    assert _stopped_build_steps() == stopped, "the failed step's container was left behind"
    line = str(raised.value)
    assert "\n" not in line and "building the image of task broken failed (exit code 1): at Step 2/3 : RUN echo " \
        "about to fail && false: about to fail / The command '/bin/sh -c echo about to fail && false' returned a " \
        "non-zero code: 1; if a step downloads (apt-get, pip, curl), it may have had no route out: build with " \
        "ENVKIT_HARBOR_BUILD_NETWORK=host (the engine's host network); its log: " in line, line
    log = Path(line.rpartition("its log: ")[2])
    assert log.is_file() and "about to fail" in log.read_text()


def _stopped_build_steps() -> list[str]:
    """Exited containers of the base image: what a failed build step leaves unless the builder removes it."""
    listed = subprocess.run(["docker", "ps", "-aq", "--filter", "status=exited", "--filter",
                             "ancestor=python:3.11-slim"], capture_output=True, text=True, check=True)
    return sorted(listed.stdout.split())


def _this_pid() -> int:
    return os.getpid()


def _settled(server_pid: int, *, want: int = 0, timeout_s: float = 15.0) -> list[str]:
    """The server's task containers once there are `want` of them, or when `timeout_s` is up."""
    deadline = time.monotonic() + timeout_s
    while len(found := task_containers(server_pid)) != want and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def test_the_reference_agent_solves_a_task_in_its_container(tasks: Path, no_warm_pool: None) -> None:
    """As training drives a Harbor task: a container with a channel, the instruction, the agent, the task's tests.
    The model is scripted (tests/scripted_model.py) on the channel's socket: no model runs here."""
    env = harbor_environment(tasks)()
    try:
        with task_container_starts(_this_pid()) as started:
            env.reset(task_id="hello")
            box = env.agent_sandbox()
            time.sleep(1)       # for the engine's events to arrive
        assert len(started) == 1    # the container reset took is the agent's
        assert box.channel_dir is not None and env.agent_sandbox() is box
        with pytest.raises(ValueError, match="already has the channel folder .*reset\\(\\) first"):
            env.agent_sandbox(channel_dir=tempfile.gettempdir())
        instruction = env.agent_instruction()
        assert instruction == "Write hello to /app/hello.txt.\n"
        replies = [tool_reply("echo hello > hello.txt && cat /app/hello.txt"), text_reply("Done.")]
        with ScriptedModel(f"{box.channel_dir}/proxy.sock", "key-1", replies) as model:
            result = run_agent(box, reference_command(instruction), api_key="key-1", timeout_s=60)
        assert result.ok, result
        assert model.requests[1]["messages"][-1]["content"].startswith("hello")
        assert env.finish_episode() == 1.0 and env.finish_episode() == 1.0
        channel = box.channel_dir
        env.reset(task_id="hello")
        assert not os.path.exists(channel)          # the session's own channel went with its container
        env.run_command("ls")
        with pytest.raises(ValueError, match="right after reset"):
            env.agent_sandbox()
    finally:
        env.close()
    assert not os.path.exists(channel) and _settled(_this_pid()) == []


def test_no_engine_is_one_line_not_a_traceback(tasks: Path, tmp_path: Path) -> None:
    """A server with no Docker engine to reach says so in one line, on the server's side and the caller's."""
    done = subprocess.run([sys.executable, "-m", "envkit.cli", "eval", "--env", str(tasks / "hello"), "--policy",
                           "oracle"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "a bug in the environment" not in done.stderr
    assert done.stderr.count("no Docker engine answers at unix://") == 2, done.stderr   # the server's log, the error


def test_validate_warns_where_harbor_would_refuse_a_task_name(tmp_path: Path) -> None:
    """harbor 0.25 takes a task.toml's [task].name only as org/name; envkit serves the task either way, and validate
    says so as a warning naming the task and the fix."""
    from envkit.publish.validate import validate_tasks

    require_engine()
    make_task(tmp_path / "tasks" / "finding-router", solve="echo hello > /app/hello.txt", test=CHECK_HELLO,
              toml='[task]\nname = "finding-router"\n')
    make_task(tmp_path / "tasks" / "hello", solve="echo hello > /app/hello.txt", test=CHECK_HELLO,
              toml='[task]\nname = "envkit/hello"\n')
    report = validate_tasks(tmp_path / "tasks")
    check = next(check for check in report.checks if check.name == "task names")
    assert report.ok and check.status == "warn", report.table()
    assert check.detail == ("finding-router/task.toml: [task].name 'finding-router' is not in harbor's 'org/name' form "
                            "(letters, digits, '.', '_' and '-' each side of one '/'), so `harbor run` refuses the "
                            "task; name it e.g. 'my-org/finding-router'")


def test_validate_gives_each_failed_build_a_row_of_its_own_in_full(tmp_path: Path) -> None:
    from envkit.publish.validate import validate_tasks

    require_engine()
    for name in ("first", "second"):
        make_task(tmp_path / "tasks" / name, solve="true", test="true",
                  dockerfile=f"FROM python:3.11-slim\nRUN echo {name} build fails here && false\n")
    report = validate_tasks(tmp_path / "tasks")
    rows = {check.name: check for check in report.checks if check.name.startswith("image")}
    assert set(rows) == {"image first", "image second"} and not report.ok, report.table()
    for name, check in rows.items():
        assert check.status == "fail" and "ENVKIT_HARBOR_BUILD_NETWORK=host" in check.detail
        assert f"echo {name.split()[1]} build fails here && false' returned a non-zero code: 1;" in check.detail


# -- the task container as harbor 0.25 makes it ------------------------------------------------------------------


def engine_default(command: str) -> str:
    """What `command` prints in a plain container of the base image: the engine's defaults, which harbor keeps."""
    return subprocess.run(["docker", "run", "--rm", "--network", "none", "python:3.11-slim", "bash", "-c", command],
                          capture_output=True, text=True, check=True, timeout=60).stdout


def test_per_process_limits_are_the_engines_as_in_harbor(env: EnvClient) -> None:
    """harbor sets no rlimit: open files are the engine's default, the address space is bounded by the memory cgroup
    only (tests/test_harbor_checks.py runs examples/harbor_tasks/open-many-files, which needs both, in harbor)."""
    env.reset(task_id="hello")
    limits = "ulimit -n; ulimit -Hn; ulimit -v; ulimit -t"
    seen = env.call("run_command", command=limits)
    assert seen.observation["output"].split()[:4] == engine_default(limits).split(), seen.text


def test_the_log_folders_are_there_from_the_start(env: EnvClient) -> None:
    """harbor mounts /logs/agent and /logs/verifier before the agent's turn: an agent may log there at once."""
    env.reset(task_id="hello")
    seen = env.call("run_command", command="ls -d /logs/agent /logs/verifier && echo ok > /logs/agent/notes.txt")
    assert seen.observation["exit_code"] == 0, seen.text
    assert seen.text.split()[:2] == ["/logs/agent", "/logs/verifier"]


def test_no_host_path_reaches_a_prompt(tasks: Path, no_warm_pool: None) -> None:
    """The folder's place on the server's machine is nobody's business: not in /metadata, not in a prompt."""
    app = app_from_environment(harbor_environment(tasks), max_concurrent_envs=2)
    with running_server(app) as url:
        metadata = httpx.get(url + "/metadata", trust_env=False).json()
        done = subprocess.run([sys.executable, "-m", "envkit.cli", "eval", "--env-url", url, "--policy", "random",
                               "--games", "1", "--transcripts", str(tasks.parent / "random.jsonl"), "-q"],
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    first = json.loads((tasks.parent / "random.jsonl").read_text().splitlines()[0])["messages"][0]["content"]
    for text in (json.dumps(metadata), first):
        assert str(tasks) not in text and str(tasks.parent) not in text, text


def test_the_oracles_and_the_verifiers_output_reach_the_transcript(tmp_path: Path) -> None:
    """A failing oracle says why (its output and exit code), and the tests' output is in the submit's answer, as
    harbor keeps both in its job folder."""
    require_engine()
    make_task(tmp_path / "tasks" / "failing", solve="echo the oracle cannot do it >&2; exit 4",
              test=f"echo the tests looked for hello; echo 0 > {REWARD}")
    path = tmp_path / "oracle.jsonl"
    done = subprocess.run([sys.executable, "-m", "envkit.cli", "eval", "--env", str(tmp_path / "tasks"), "--policy",
                           "oracle", "--transcripts", str(path), "-q"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    turns = {turn["tool"]: turn["result"] for turn in json.loads(path.read_text())["turns"]}
    assert "the oracle cannot do it" in turns["run_command"] and "exit code 4" in turns["run_command"]
    assert "the tests looked for hello" in turns["submit"]


def test_the_oracle_copies_the_solution_with_its_bytes_and_modes(tmp_path: Path) -> None:
    """examples/harbor_tasks/first-primes: solve.sh runs an executable helper that unpacks a gzip'd answer; harbor's
    upload keeps both (bytes and modes), and so must the oracle, or the episode fails (or `eval` crashes on the gzip)."""
    require_engine()
    task = Path(__file__).resolve().parent.parent / "examples" / "harbor_tasks" / "first-primes"
    path = tmp_path / "oracle.jsonl"
    done = subprocess.run([sys.executable, "-m", "envkit.cli", "eval", "--env", str(task), "--policy", "oracle",
                           "--transcripts", str(path), "-q"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    game = json.loads(path.read_text())
    assert "unpacked 200 lines to /app/primes.txt" in game["turns"][-2]["result"]
    assert game["reward"] == 1.0


def test_a_missing_absolute_path_is_named_as_given(env: EnvClient) -> None:
    env.reset(task_id="hello")
    assert env.call("read_file", path="/app/missing.txt").text == "refused: no file /app/missing.txt"
    assert env.call("read_file", path="missing.txt").text == "refused: no file 'missing.txt' in the work folder /app"
