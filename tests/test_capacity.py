"""Capacity: the N+1th session is refused at connect, and slots free however a session ends."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Callable, Iterator

import httpx
import pytest
from sample_envs import (CounterAction, CounterEnvironment, CounterObservation, SlowCloseEnvironment,
                         SlowClosingCounterEnvironment, StuckCloseEnvironment)
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from envkit import CapacityError, EnvClient, EnvConnectionError, create_app
from envkit.bench import run_churn, run_sync
from envkit.client import websocket_url
from envkit.testing import running_server


@pytest.fixture
def two_slot_url() -> Iterator[str]:
    app = create_app(CounterEnvironment, CounterAction, CounterObservation, max_concurrent_envs=2)
    with running_server(app) as url:
        yield url


def wait_for(condition: Callable[[], bool], within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the server never reached the expected state")
        time.sleep(0.02)


def wait_for_active(url: str, expected: int, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if httpx.get(url + "/health", trust_env=False).json()["active_sessions"] == expected:
            return
        time.sleep(0.05)
    raise AssertionError(f"active sessions never reached {expected}")


def test_over_capacity_raw_gets_error_frame_then_close_1013(two_slot_url: str) -> None:
    ws_url = websocket_url(two_slot_url)
    built = CounterEnvironment.instances
    with connect(ws_url, proxy=None), connect(ws_url, proxy=None):
        with connect(ws_url, proxy=None) as third:
            frame = json.loads(third.recv(timeout=10))
            assert frame["type"] == "error"
            assert frame["data"]["code"] == "CAPACITY_REACHED"
            assert frame["data"]["max_sessions"] == 2 and "max-concurrent-envs" in frame["data"]["message"]
            with pytest.raises(ConnectionClosed) as closed:
                third.recv(timeout=10)
            assert closed.value.rcvd.code == 1013
    assert CounterEnvironment.instances == built + 2   # no environment was built for the refused one


def test_capacity_error_at_connect_and_slot_frees_on_close(two_slot_url: str) -> None:
    first = EnvClient(two_slot_url).sync().connect()
    second = EnvClient(two_slot_url).sync().connect()
    with pytest.raises(CapacityError) as refused:
        EnvClient(two_slot_url).sync().connect()
    assert (refused.value.active_sessions, refused.value.max_sessions) == (2, 2)
    first.close()
    wait_for_active(two_slot_url, 1)
    with EnvClient(two_slot_url).sync() as third:
        assert third.reset().reward == 0.0
    second.close()
    wait_for_active(two_slot_url, 0)


CRASHING_CLIENT = """
import sys, time
from websockets.sync.client import connect
sock = connect(sys.argv[1], proxy=None)
sock.send('{"type": "reset"}'); sock.recv(timeout=10)
print("ready", flush=True)
time.sleep(60)
"""


def test_slot_frees_when_a_client_process_is_killed(two_slot_url: str) -> None:
    ws_url = websocket_url(two_slot_url)
    clients = [subprocess.Popen([sys.executable, "-c", CRASHING_CLIENT, ws_url], stdout=subprocess.PIPE, text=True)
               for _ in range(2)]
    try:
        for client in clients:
            assert client.stdout.readline().strip() == "ready"
        with pytest.raises(CapacityError):
            EnvClient(two_slot_url).sync().connect()
        clients[0].kill()
        clients[0].wait(10)
        wait_for_active(two_slot_url, 1)
        with EnvClient(two_slot_url).sync() as env:
            env.reset()
            assert env.step({"amount": 3}).observation["total"] == 3
    finally:
        for client in clients:
            client.kill()
            client.wait(10)


def test_slot_frees_when_a_client_leaves_during_a_slow_step(two_slot_url: str) -> None:
    ws_url = websocket_url(two_slot_url)
    built = CounterEnvironment.instances
    with connect(ws_url, proxy=None) as sock:
        sock.send('{"type": "reset"}')
        sock.recv(timeout=10)
        sock.send('{"type": "step", "data": {"sleep_s": 1.0}}')
        sock.send('{"type": "step", "data": {"amount": 2}}')   # waits behind the slow one, then is dropped
    wait_for_active(two_slot_url, 0)
    with EnvClient(two_slot_url).sync() as env:
        env.reset()
        assert env.step({"amount": 1}).observation["total"] == 1
    assert CounterEnvironment.instances == built + 2


def test_a_slot_comes_back_only_once_the_environment_has_closed() -> None:
    """max_concurrent_envs bounds live environments: while a closed session's env.close() still runs, its slot
    stays taken, however the session ended (here the client sent close, then its socket went)."""
    app = create_app(StuckCloseEnvironment, CounterAction, CounterObservation, max_concurrent_envs=1,
                     capacity_wait_s=0)
    pool = app.state.envkit_pool
    StuckCloseEnvironment.release.clear()
    try:
        with running_server(app) as url:
            with EnvClient(url).sync() as first:
                first.reset()
            wait_for(lambda: pool.closing == 1)
            time.sleep(0.2)   # the socket has gone too
            with pytest.raises(CapacityError):
                EnvClient(url).sync().connect()
            StuckCloseEnvironment.release.set()
            wait_for(lambda: pool.active == 0)
            with EnvClient(url).sync() as second:
                assert second.reset().reward == 0.0
    finally:
        StuckCloseEnvironment.release.set()


def test_a_client_that_closes_and_reopens_at_once_gets_the_one_slot() -> None:
    """The slot of a session still closing on the server (its env's close() takes 0.3 s) goes to the reconnect."""
    app = create_app(SlowCloseEnvironment, CounterAction, CounterObservation, max_concurrent_envs=1)
    with running_server(app) as url:
        for round_number in range(4):
            with EnvClient(url).sync() as client:
                client.reset()
                assert client.step(CounterAction(amount=round_number)).observation["total"] == round_number


def test_a_connection_waiting_for_a_slot_is_refused_at_shutdown() -> None:
    """A connection waiting for a slot when the server stops is told it is shutting down, not left hanging."""
    app = create_app(CounterEnvironment, CounterAction, CounterObservation, max_concurrent_envs=1,
                     capacity_wait_s=60)
    pool = app.state.envkit_pool
    outcome: list[BaseException | str] = []

    def connect_second(url: str) -> None:
        try:
            EnvClient(url, connect_timeout=30).sync().connect()
            outcome.append("connected")
        except BaseException as error:  # noqa: BLE001 - the test reads which error it was
            outcome.append(error)

    with running_server(app) as url:
        holder = EnvClient(url).sync().connect()
        waiting = threading.Thread(target=connect_second, args=(url,))
        waiting.start()
        deadline = time.monotonic() + 10
        while not pool._slot_waiters and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pool._slot_waiters, "the second connection never started waiting for a slot"
    waiting.join(timeout=30)
    holder.close()
    assert len(outcome) == 1 and isinstance(outcome[0], EnvConnectionError)
    assert "shutting down" in str(outcome[0])


def test_no_slot_leaks_when_more_clients_than_slots_open_and_close_sessions() -> None:
    """Twelve loops opening, resetting and closing sessions against four slots whose environments take a while
    to close: connections wait for slots or are refused, and once the loops stop every count is back to zero."""
    app = create_app(SlowClosingCounterEnvironment, CounterAction, CounterObservation, max_concurrent_envs=4,
                     capacity_wait_s=0.5)
    pool = app.state.envkit_pool
    with running_server(app) as url:
        result = run_sync(run_churn(url, 2.0, workers=12, client="raw"))
        wait_for(lambda: (pool.active, pool.closing, pool.waiting_for_slots, len(pool._sessions)) == (0, 0, 0, 0))
    assert result.sessions > 0
    assert set(result.failures) <= {"error frame: CAPACITY_REACHED"}, result.failures
