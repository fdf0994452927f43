"""`envkit serve --ray`: a real two-node Ray cluster on 127.0.0.1, envkit servers as actors, a replica killed.

One cluster for the module (Ray's own `ray.cluster_utils.Cluster`: a head and a second node,
one CPU each, every address 127.0.0.1). Skipped only when Ray is not installed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any, Iterator

import httpx
import pytest
from conftest import TESTS_DIR, subprocess_env

ray = pytest.importorskip("ray", reason="Ray is not installed; pip install 'envkit[ray]' to run the Ray tests")
from ray.cluster_utils import Cluster  # noqa: E402

from envkit import EnvClient, SessionLostError  # noqa: E402

TARGET = "sample_envs:PidCounterEnvironment"
#: Ray resolves 127.0.0.1 to the machine's outward address unless told it runs no cluster across machines.
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
_REGISTRY = re.compile(r"registry listing live replicas at (http://[\d.]+:\d+/replicas)")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    saved = {name: os.environ.get(name) for name in [*LOOPBACK_ONLY, "PYTHONPATH"]}
    os.environ.update(LOOPBACK_ONLY)   # the raylets and their workers inherit it, and find sample_envs
    os.environ["PYTHONPATH"] = subprocess_env()["PYTHONPATH"]
    started = time.monotonic()
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1",
                                                          "include_dashboard": False})
    nodes.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    nodes.wait_for_nodes()
    print(f"\nRay cluster of 2 nodes up in {time.monotonic() - started:.1f}s")
    try:
        yield nodes
    finally:
        nodes.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class RayServe:
    """`envkit serve TARGET --ray ADDRESS ...` in a subprocess; `registry` is the URL it printed."""

    def __init__(self, address: str, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "envkit.cli", "serve", TARGET, "--ray", address, "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=subprocess_env(**LOOPBACK_ONLY),
            cwd=TESTS_DIR)
        self.output: list[str] = []
        self.registry = ""
        assert self.process.stdout is not None
        deadline = time.monotonic() + 180
        for line in self.process.stdout:
            self.output.append(line)
            match = _REGISTRY.search(line)
            if match:
                self.registry = match.group(1)
                break
            assert time.monotonic() < deadline, "envkit serve --ray did not start:\n" + "".join(self.output)
        assert self.registry, "envkit serve --ray ended:\n" + "".join(self.output)
        threading.Thread(target=lambda: self.output.extend(self.process.stdout), daemon=True).start()

    def replicas(self) -> list[dict[str, Any]]:
        return httpx.get(self.registry, timeout=5).json()["replicas"]


def wait_for(predicate: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_replicas_on_two_nodes_survive_a_killed_replica_and_stop_cleanly(cluster: Cluster) -> None:
    started = time.monotonic()
    serve = RayServe(cluster.address, "--replicas", "2", "--max-concurrent-envs", "8")
    try:
        replicas = serve.replicas()
        assert len(replicas) == 2 and len({replica["node"] for replica in replicas}) == 2, replicas
        assert all(replica["url"].startswith("http://127.0.0.1:") for replica in replicas)
        registry_health = httpx.get(serve.registry[: -len("/replicas")] + "/health").json()
        assert (registry_health["max_sessions"], registry_health["live_replicas"]) == (16, 2)

        # several clients play episodes; the registry spreads them over both replicas
        clients = [EnvClient(serve.registry).sync() for _ in range(6)]
        for index, client in enumerate(clients):
            client.reset(tag=str(index))
            client.step({"amount": index})
        home = {index: int(client.call("whoami").text) for index, client in enumerate(clients)}
        assert sorted(Counter(home.values()).values()) == [3, 3]
        assert {replica["pid"] for replica in replicas} == set(home.values())

        victim = replicas[0]
        os.kill(victim["pid"], signal.SIGKILL)
        wait_for(lambda: [replica["pid"] for replica in serve.replicas()] != [r["pid"] for r in replicas],
                 "the registry to drop the killed replica")
        assert victim["pid"] not in {replica["pid"] for replica in serve.replicas()}
        lost = [index for index in home if home[index] == victim["pid"]]
        for index, client in enumerate(clients):
            if index in lost:
                with pytest.raises(SessionLostError):
                    client.step({"amount": 1})
            else:
                assert client.step({"amount": 1}).observation["total"] == index + 1
        for index in lost:   # the next episode lands on a live replica
            assert clients[index].reset(tag="again").observation["tag"] == "again"
            assert int(clients[index].call("whoami").text) != victim["pid"]

        # Ray restarts the replica in a new process; the registry lists it again
        wait_for(lambda: len(serve.replicas()) == 2, "Ray to restart the replica")
        back = {replica["replica"]: replica for replica in serve.replicas()}
        assert back[victim["replica"]]["pid"] != victim["pid"]
        fresh = EnvClient(serve.registry).sync()
        fresh.reset()
        assert fresh.step({"amount": 5}).observation["total"] == 5

        # Ctrl-C: every session on every replica is closed with 1001, then the command exits 0
        serve.process.send_signal(signal.SIGINT)
        assert serve.process.wait(60) == 0, "".join(serve.output)
        for client in [*clients, fresh]:
            with pytest.raises(SessionLostError) as caught:
                client.step({"amount": 1})
            assert caught.value.close_code == 1001
        print(f"Ray serve test body took {time.monotonic() - started:.1f}s")
    finally:
        if serve.process.poll() is None:
            serve.process.kill()
            serve.process.wait(30)


def test_unreachable_ray_address_is_one_clear_line(cluster: Cluster) -> None:
    result = subprocess.run([sys.executable, "-m", "envkit.cli", "serve", "echo", "--ray", "127.0.0.1:1",
                             "--port", "0"], capture_output=True, text=True, timeout=180,
                            env=subprocess_env(**LOOPBACK_ONLY))
    assert result.returncode == 1, result.stderr
    assert "cannot reach the Ray cluster at 127.0.0.1:1" in result.stderr and "Traceback" not in result.stderr


def test_a_loopback_registry_is_refused_when_replicas_run_on_other_machines() -> None:
    from envkit.scale.ray_serve import RayServeError, _registry_url_for_nodes

    assert _registry_url_for_nodes("127.0.0.1", 8000, {"127.0.0.1"}) == "http://127.0.0.1:8000"
    assert _registry_url_for_nodes("10.0.0.1", 8000, {"10.0.0.1", "10.0.0.2"}) == "http://10.0.0.1:8000"
    with pytest.raises(RayServeError, match=r"other machines \(10.0.0.2\) cannot reach; pass --host 0.0.0.0"):
        _registry_url_for_nodes("127.0.0.1", 8000, {"127.0.0.1", "10.0.0.2"})
