"""`EnvClient.from_docker_image` against a real Docker engine (scripts/docker_engine.sh; skipped without one).

Containers of the top-level image: an episode whose container is killed, containers that exit or never answer,
an image that is not there, resource limits, many open/close cycles, and a client killed with -9 whose
containers `envkit containers --remove-orphans` finds by label and removes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from docker_engine import docker_engine, envkit_cli, own_containers, root_image  # noqa: F401  (fixtures)

from envkit import EnvClient, SessionLostError
from envkit.client.docker import ContainerError

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def test_a_container_killed_mid_episode_loses_the_session(docker_engine: Any, root_image: str) -> None:
    """The counter env of tests/sample_envs.py, mounted read-only, has a step that sleeps: it is pending at the kill."""
    client = EnvClient.from_docker_image(root_image, env_vars={"PYTHONPATH": "/samples"}, run_options={
        "command": ["sample_envs:CounterEnvironment"], "volumes": {TESTS_DIR: {"bind": "/samples", "mode": "ro"}}})
    (container,) = own_containers(docker_engine, root_image)
    with client.sync() as env, ThreadPoolExecutor(1) as pool:
        env.reset()
        assert env.step({"amount": 2}).observation["total"] == 2
        pending = pool.submit(env.step, {"amount": 1, "sleep_s": 30})
        time.sleep(1.0)   # the step's frame is out; the server sleeps in it
        container.kill()
        with pytest.raises(SessionLostError):
            pending.result(timeout=60)
        with pytest.raises(SessionLostError):
            env.step({"amount": 1})
        with pytest.raises(SessionLostError):
            env.state()
    assert own_containers(docker_engine, root_image) == []


def test_a_container_that_exits_at_start_is_one_line_with_the_tail_of_its_log(docker_engine: Any,
                                                                              root_image: str) -> None:
    with pytest.raises(ContainerError) as caught:
        EnvClient.from_docker_image(root_image, run_options={"command": ["no_such_env"]})
    message = str(caught.value)
    assert "\n" not in message, message
    assert "the container exited (code 2) before serving" in message and "no_such_env" in message, message
    assert "no_such_env" in caught.value.logs   # the whole tail stays on the exception
    assert own_containers(docker_engine, root_image) == []


def test_a_missing_image_names_the_build_command_without_pulling(docker_engine: Any) -> None:
    image = "envkit-test-no-such-image"
    with pytest.raises(ContainerError) as caught:
        EnvClient.from_docker_image(image)
    message = str(caught.value)
    assert "\n" not in message and "registry" not in message, message   # a pull would have asked a registry
    assert f"image {image!r} not found here; build it first, e.g. `docker build -t {image}" in message, message
    assert own_containers(docker_engine, image) == []


def test_a_container_that_never_answers_is_removed(docker_engine: Any, root_image: str) -> None:
    with pytest.raises(ContainerError, match=r"not healthy in 3 s \(") as caught:
        EnvClient.from_docker_image(root_image, startup_timeout=3, poll_interval=0.2,
                                    run_options={"entrypoint": ["sleep", "600"]})
    assert "\n" not in str(caught.value)
    assert own_containers(docker_engine, root_image) == []


def test_resource_limits_reach_the_container(docker_engine: Any, root_image: str) -> None:
    with EnvClient.from_docker_image(root_image, memory="256m", cpus=0.5, pids_limit=64).sync() as env:
        (container,) = own_containers(docker_engine, root_image)
        host = container.attrs["HostConfig"]
        assert (host["Memory"], host["NanoCpus"], host["PidsLimit"]) == (256 * 2**20, 500_000_000, 64)
        cgroup = container.exec_run(["cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                     "/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"])
        assert cgroup.output.decode().split() == [str(256 * 2**20), "64", "50000"]   # 0.5 of a 100 ms period
        env.reset()


def test_errors_in_the_block_and_bad_client_options_still_remove_the_container(docker_engine: Any,
                                                                              root_image: str) -> None:
    class EchoClient(EnvClient):
        pass

    with pytest.raises(ZeroDivisionError):
        with EchoClient.from_docker_image(root_image).sync() as env:
            assert isinstance(env.client, EchoClient)
            env.reset()
            1 / 0
    with pytest.raises(TypeError):
        EnvClient.from_docker_image(root_image, no_such_option=1)
    assert own_containers(docker_engine, root_image) == []


def test_a_hundred_open_close_cycles_leave_no_container(docker_engine: Any, root_image: str) -> None:
    def cycle(seed: int) -> None:
        with EnvClient.from_docker_image(root_image).sync() as env:
            env.reset(seed=seed)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(cycle, range(100)))
    assert own_containers(docker_engine, root_image) == []


CLIENT = """
import sys, time
from envkit import EnvClient
clients = [EnvClient.from_docker_image(sys.argv[1]) for _ in range(2)]
print("ready", flush=True)
time.sleep(600)
"""


def test_containers_of_a_client_killed_with_sigkill_are_found_and_removed_by_label(docker_engine: Any,
                                                                                   root_image: str) -> None:
    with EnvClient.from_docker_image(root_image).sync() as live:   # a running client's container stays
        process = subprocess.Popen([sys.executable, "-c", CLIENT, root_image], stdout=subprocess.PIPE, text=True)
        try:
            assert process.stdout is not None and process.stdout.readline() == "ready\n"
        finally:
            process.kill()
            process.wait()
        orphans = docker_engine.containers.list(all=True, filters={"label": f"envkit.client-pid={process.pid}"})
        assert len(orphans) == 2
        assert all(orphan.labels["envkit.owner"].split(".")[2] == str(process.pid) for orphan in orphans)
        listed = envkit_cli("containers")
        assert listed.returncode == 0, listed.stderr
        for orphan in orphans:
            assert f"{orphan.short_id}  orphaned (client {process.pid} gone)" in listed.stdout, listed.stdout
        removed = envkit_cli("containers", "--remove-orphans")
        assert removed.returncode == 0, removed.stderr
        for orphan in orphans:
            assert f"removed {orphan.short_id}  orphaned" in removed.stdout, removed.stdout
        (left,) = own_containers(docker_engine, root_image)
        assert left.labels["envkit.client-pid"] == str(os.getpid())
        live.reset()
    assert own_containers(docker_engine, root_image) == []


def test_only_containers_of_clients_provably_gone_are_orphans(docker_engine: Any, root_image: str) -> None:
    """A pid alone does not tell: a client's pid may be reused by a live process, and a client in another pid
    namespace (in a container using the engine's socket) has a pid that names some other process here, or none."""
    from envkit.client.docker import envkit_containers
    from envkit.owner import current_owner

    boot, namespace, pid, started = current_owner().split(".")
    gone = subprocess.Popen(["true"])
    gone.wait()
    owners = {"gone": (gone.pid, f"{boot}.{namespace}.{gone.pid}.{started}"),
              "another namespace": (gone.pid, f"{boot}.1.{gone.pid}.{started}"),
              "another host": (1, f"000000000000.{namespace}.1.1"), "live": (os.getpid(), current_owner()),
              "reused pid": (os.getppid(), f"{boot}.{namespace}.{os.getppid()}.1")}
    made = {name: docker_engine.containers.create(root_image, "true", labels={
        "envkit.client-pid": str(client), "envkit.client-host": os.uname().nodename, "envkit.owner": owner}).id
        for name, (client, owner) in owners.items()}
    try:
        orphaned = {found.id: found.orphaned for found in envkit_containers(docker_engine)}
        assert {name: orphaned[container] for name, container in made.items()} == {
            "gone": True, "another namespace": False, "another host": False, "live": False, "reused pid": True}
    finally:
        for container in made.values():
            docker_engine.containers.get(container).remove(force=True)
