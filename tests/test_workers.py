"""`envkit serve --workers N`: real worker processes behind one port, real clients, a worker killed with SIGKILL."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import httpx
import pytest
from conftest import subprocess_env

from envkit import CapacityError, EnvClient, SessionLostError
from envkit.testing import ServedProcess
from envkit.scale.workers import WorkerBoard, worker_shares

COUNTER = "sample_envs:PidCounterEnvironment"


def health(url: str) -> dict:
    return httpx.get(url + "/health", timeout=5).json()


def wait_for(predicate, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_worker_shares_sum_to_the_limit() -> None:
    assert worker_shares(64, 2) == [32, 32]
    assert worker_shares(5, 3) == [2, 2, 1]
    assert sum(worker_shares(7, 4)) == 7


def _hold_the_lock_forever(board: WorkerBoard, holding: Any) -> None:
    board._lock.acquire()
    holding.set()
    time.sleep(60)


def test_a_worker_killed_while_holding_the_count_lock_does_not_stall_the_others() -> None:
    board = WorkerBoard(2, 4)
    assert board.try_reserve(0) and board.try_reserve(1)
    context = multiprocessing.get_context("fork")
    holding = context.Event()
    holder = context.Process(target=_hold_the_lock_forever, args=(board, holding))
    holder.start()
    assert holding.wait(30), "the other process did not take the lock"
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(10)
    board.ended(0)   # the supervisor's call when a worker dies
    assert board.try_reserve(1) and [row["active_sessions"] for row in board.rows()] == [0, 2]


def test_workers_share_the_port_the_limit_and_health_and_survive_a_killed_worker() -> None:
    with ServedProcess(COUNTER, "--workers", "2", "--max-concurrent-envs", "16", env=subprocess_env()) as served:
        assert "over 2 workers" in "".join(served.output)
        document = health(served.url)
        assert (document["active_sessions"], document["max_sessions"]) == (0, 16)
        assert [(row["worker"], row["share"], row["status"]) for row in document["workers"]] == [
            (0, 8, "ready"), (1, 8, "ready")]
        # the kernel spreads connections by a hash of their addresses: open sessions until each worker holds two
        clients: list = []
        home: dict[int, int] = {}   # session index -> pid of the worker holding it
        held: Counter[int] = Counter()
        while len(clients) < 14 and (len(held) < 2 or min(held.values()) < 2):
            client = EnvClient(served.url).sync()
            client.reset(tag=str(len(clients)))
            client.step({"amount": len(clients)})
            home[len(clients)] = int(client.call("whoami").text)
            held[home[len(clients)]] += 1
            clients.append(client)
        assert len(held) == 2 and min(held.values()) >= 2, held
        # every worker answers /health with the whole and each worker
        answers = [health(served.url) for _ in range(6)]
        assert {answer["active_sessions"] for answer in answers} == {len(clients)}
        assert {answer["worker"] for answer in answers} <= {0, 1}
        rows = {row["pid"]: row for row in answers[0]["workers"]}
        assert {pid: row["active_sessions"] for pid, row in rows.items()} == dict(held)

        victim = min(held, key=lambda pid: rows[pid]["worker"])
        os.kill(victim, signal.SIGKILL)
        lost, kept = [], []
        for index, client in enumerate(clients):
            if home[index] == victim:
                with pytest.raises(SessionLostError):
                    client.step({"amount": 1})
                lost.append(client)
            else:
                assert client.step({"amount": 1}).observation["total"] == index + 1
                kept.append(client)
        assert (len(lost), len(kept)) == (held[victim], len(clients) - held[victim])

        worker = rows[victim]["worker"]
        wait_for(lambda: health(served.url)["workers"][worker]["status"] == "ready", what="the restart")
        restarted = health(served.url)
        row = restarted["workers"][worker]
        assert row["restarts"] == 1 and row["pid"] != victim and row["active_sessions"] == 0
        assert restarted["active_sessions"] == len(kept)
        for client in lost:   # a new episode opens on a live worker; the lost sessions' slots are free again
            assert client.reset(tag="again").observation["tag"] == "again"
            assert int(client.call("whoami").text) != victim
        assert health(served.url)["active_sessions"] == len(clients)
        assert f"ended with signal SIGKILL; its {len(lost)} session(s) are lost" in "".join(served.output)

        # the whole's limit holds whichever worker takes the connection
        extra = [EnvClient(served.url).sync() for _ in range(16 - len(clients))]
        for client in extra:
            client.reset()
        with pytest.raises(CapacityError, match="16/16 sessions open"):
            EnvClient(served.url).sync().reset()

        # SIGTERM: every session, on every worker, is closed with 1001; the supervisor exits 0
        assert served.terminate() == 0
        for client in [*clients, *extra]:
            with pytest.raises(SessionLostError) as caught:
                client.step({"amount": 1})
            assert caught.value.close_code == 1001


def running(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (an exited child not yet reaped is a zombie: not running)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process states from /proc")
def test_workers_stop_when_the_supervisor_is_killed() -> None:
    """A supervisor killed with SIGKILL cannot stop its workers; they stop by themselves, closing their sessions, and
    nothing is left listening on the port."""
    with ServedProcess(COUNTER, "--workers", "2", env=subprocess_env()) as served:
        pids = [row["pid"] for row in health(served.url)["workers"]]
        port = int(served.url.rsplit(":", 1)[1])
        client = EnvClient(served.url).sync()
        client.reset()
        assert all(running(pid) for pid in pids)
        served.kill()
        wait_for(lambda: not any(running(pid) for pid in pids), timeout=15, what="the workers to stop")
        with pytest.raises(SessionLostError) as lost:
            client.step({"amount": 1})
        assert lost.value.close_code == 1001   # its worker stopped as a server stops: the session closed, going away
        client.close()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_sessions_spread_over_workers() -> None:
    with ServedProcess(COUNTER, "--workers", "2", "--max-concurrent-envs", "64", env=subprocess_env()) as served:
        clients = [EnvClient(served.url).sync() for _ in range(64)]
        for client in clients:
            client.reset()
        per_worker = [row["active_sessions"] for row in health(served.url)["workers"]]
        # a hash spread: each worker gets 32 +- a few (below 16 happens about once in 30,000 runs)
        assert sum(per_worker) == 64 and min(per_worker) >= 16, per_worker
        for client in clients:
            client.close()


@pytest.mark.parametrize(("args", "message"), [
    (["--replicas", "2"], "add --ray [ADDRESS]"),
    (["--workers", "2", "--ray"], "pass one"),
    (["--workers", "0"], "--workers"),
])
def test_scale_out_usage_errors_exit_2_with_the_fix(args: list[str], message: str) -> None:
    result = subprocess.run([sys.executable, "-m", "envkit.cli", "serve", "echo", "--port", "0", *args],
                            capture_output=True, text=True, timeout=60, env=subprocess_env())
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_workers_port_taken_is_one_line() -> None:
    with ServedProcess("echo") as served:
        port = served.url.rsplit(":", 1)[1]
        result = subprocess.run([sys.executable, "-m", "envkit.cli", "serve", "echo", "--port", port, "--workers",
                                 "2"], capture_output=True, text=True, timeout=60, env=subprocess_env())
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "Traceback" not in result.stderr


def test_plain_serve_and_import_never_load_ray() -> None:
    code = ("import sys, envkit, envkit.client.env_client, envkit.client.placement, envkit.scale.workers, envkit.scale.registry, envkit.cli.serve;"
            "from envkit.cli.main import cli; cli.get_command(None, 'serve');"
            "loaded = sorted(name for name in sys.modules if name == 'ray' or name.startswith('ray.'));"
            "print(loaded); sys.exit(1 if loaded else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env=subprocess_env())
    assert result.returncode == 0, result.stdout + result.stderr
