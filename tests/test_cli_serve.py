"""`envkit serve` as a user runs it: real subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import subprocess_env

from envkit import EnvClient
from envkit.testing import ServedProcess

REPO = Path(__file__).resolve().parents[1]


def envkit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envkit.cli", *args], capture_output=True, text=True, timeout=60,
                          env=env or subprocess_env())


@pytest.mark.parametrize("args, message", [
    (["serve", "no_such_env"], "'no_such_env' is neither a bundled env ("),
    (["serve", "sample_envs:Missing"], "has no attribute 'Missing'"),
    (["serve", "no_module_here:Env"], "cannot import 'no_module_here'"),
    (["serve", "sample_envs:CounterAction"], "not an envkit Environment subclass"),
    (["serve", "sample_envs:SingleSessionEnvironment", "--max-concurrent-envs", "4"], "SUPPORTS_CONCURRENT_SESSIONS"),
    (["serve", "echo", "--port", "99999"], "Invalid value for '--port'"),
    (["serve", "echo", "--max-concurrent-envs", "0"], "Invalid value for '--max-concurrent-envs'"),
    (["serve", "echo", "--session-timeout", "-1"], "Invalid value for '--session-timeout'"),
    (["serve", "echo", "--bogus"], "No such option"),   # click's wording of the rest changed across 8.x
    (["serve", "echo", "--ping-timeout", "0"], "Invalid value for '--ping-timeout'"),
    (["serve", "echo", "--capacity-wait", "-1"], "Invalid value for '--capacity-wait'"),
    (["serve", "echo", "--ping-interval", "-1"], "Invalid value for '--ping-interval'"),
    (["serve"], "Missing argument 'TARGET'"),
])
def test_bad_target_or_flag_is_a_usage_error(args: list[str], message: str) -> None:
    done = envkit(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_bad_environment_variable_is_a_usage_error() -> None:
    done = envkit("serve", "echo", env=subprocess_env(MAX_CONCURRENT_ENVS="lots"))
    assert done.returncode == 2 and "MAX_CONCURRENT_ENVS='lots' is not a number" in done.stderr


def test_serve_honours_max_concurrent_envs_from_the_environment() -> None:
    with ServedProcess("echo", env=subprocess_env(MAX_CONCURRENT_ENVS="3")) as served:
        assert httpx.get(served.url + "/health", trust_env=False).json()["max_sessions"] == 3
        assert "max 3 sessions" in "".join(served.output)


def test_serve_flag_beats_the_environment_and_an_env_folder_path_works() -> None:
    with ServedProcess(str(REPO / "envs" / "echo"), "--max-concurrent-envs", "5",
                       env=subprocess_env(MAX_CONCURRENT_ENVS="3")) as served:
        assert httpx.get(served.url + "/health", trust_env=False).json()["max_sessions"] == 5
        with EnvClient(served.url).sync() as env:
            env.reset()
            assert env.step({"message": "folder"}).reward == pytest.approx(0.6)


def test_serve_module_class_target() -> None:
    with ServedProcess("sample_envs:CounterEnvironment", "--session-timeout", "30", "--capacity-wait", "0.5",
                       "--ping-interval", "10", "--ping-timeout", "5", env=subprocess_env()) as served:
        metadata = httpx.get(served.url + "/metadata", trust_env=False).json()
        assert metadata["name"] == "CounterEnvironment" and metadata["session_timeout_s"] == 30
        assert (metadata["capacity_wait_s"], metadata["ping_interval_s"], metadata["ping_timeout_s"]) == (0.5, 10, 5)
        with EnvClient(served.url).sync() as env:
            env.reset()
            assert env.call("add", amount=4).observation["total"] == 4


def test_help_has_an_example() -> None:
    done = envkit("serve", "--help")
    assert done.returncode == 0 and "envkit serve echo --port 8001" in done.stdout


def process_environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


@pytest.mark.skipif(not Path("/proc/self/environ").exists() or "PYTHONMALLOC" in os.environ,
                    reason="reads the server's environment from /proc; needs PYTHONMALLOC unset here")
@pytest.mark.parametrize("given, expected", [(None, "malloc"), ("pymalloc", "pymalloc")])
def test_serve_runs_on_the_c_allocator_unless_pythonmalloc_is_set(given: str | None,
                                                                  expected: str) -> None:
    """Same process id and command line, re-run once with PYTHONMALLOC=malloc; a PYTHONMALLOC given is kept."""
    with ServedProcess("echo", env={"PYTHONMALLOC": given} if given else None) as served:
        assert served.process is not None
        assert process_environment(served.process.pid).get("PYTHONMALLOC") == expected
        with EnvClient(served.url).sync() as client:
            assert client.reset().observation
