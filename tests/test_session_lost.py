"""SessionLost semantics: a dropped connection is an error on the pending call and every later one."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest
from conftest import subprocess_env
from sample_envs import CounterAction, CounterEnvironment, CounterObservation, StuckCloseEnvironment
from tcp_proxy import FreezableProxy
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from envkit import EnvClient, SessionLostError, create_app
from envkit.client import websocket_url
from envkit.testing import ServedProcess, free_port, running_server

COUNTER = "sample_envs:CounterEnvironment"


def test_server_killed_mid_call_then_reset_on_a_new_server() -> None:
    port = free_port()
    with ServedProcess(COUNTER, "--max-concurrent-envs", "4", port=port, env=subprocess_env()) as served:
        env = EnvClient(served.url).sync()
        env.reset(tag="doomed")
        session_id = env.session_id
        outcome: dict[str, BaseException] = {}

        def slow_step() -> None:
            try:
                env.step({"sleep_s": 20})
            except BaseException as error:  # noqa: BLE001 — the test inspects it
                outcome["error"] = error

        caller = threading.Thread(target=slow_step)
        caller.start()
        time.sleep(0.5)
        served.kill()
        caller.join(15)
        assert not caller.is_alive(), "the pending call did not end when the server died"
    lost = outcome["error"]
    assert isinstance(lost, SessionLostError)
    assert lost.session_id == session_id and "connection dropped" in lost.reason
    for later in (lambda: env.step({"amount": 1}), env.state, lambda: env.call("peek")):
        with pytest.raises(SessionLostError):
            later()
    with ServedProcess(COUNTER, "--max-concurrent-envs", "4", port=port, env=subprocess_env()):
        result = env.reset(tag="second life")
        assert result.observation == {"total": 0, "tag": "second life", "metadata": {}}
        assert env.session_id != session_id
        assert env.step({"amount": 2}).observation["total"] == 2
        env.close()


def test_idle_reap_closes_socket_and_names_the_timeout() -> None:
    app = create_app(CounterEnvironment, CounterAction, CounterObservation, max_concurrent_envs=4,
                     session_timeout_s=0.5)
    with running_server(app) as url:
        env = EnvClient(url).sync()
        env.reset()
        deadline = time.monotonic() + 10
        while env.health()["active_sessions"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert env.health()["active_sessions"] == 0, "the idle session was not reaped"
        with pytest.raises(SessionLostError) as lost:
            env.step({"amount": 1})
        assert lost.value.close_code == 4408 and "idle timeout" in lost.value.reason
        assert env.reset().observation["total"] == 0
        env.close()


def test_an_environment_stuck_closing_does_not_hold_up_reaping_the_others() -> None:
    """Two idle sessions whose env.close() hangs: both sockets are closed with 4408 while the closes still hang.

    The sessions are never reset: a machine that stalls for the idle timeout cannot reap one before the test talks."""
    app = create_app(StuckCloseEnvironment, CounterAction, CounterObservation, max_concurrent_envs=4,
                     session_timeout_s=0.5)
    StuckCloseEnvironment.release.clear()
    try:
        with running_server(app) as url, contextlib.ExitStack() as stack:
            sockets = [stack.enter_context(connect(websocket_url(url), proxy=None)) for _ in range(2)]
            for sock in sockets:
                with pytest.raises(ConnectionClosed) as closed:
                    sock.recv(timeout=15)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 4408
            StuckCloseEnvironment.release.set()
    finally:
        StuckCloseEnvironment.release.set()


def test_busy_session_is_not_reaped_mid_step() -> None:
    app = create_app(CounterEnvironment, CounterAction, CounterObservation, max_concurrent_envs=2,
                     session_timeout_s=1.0)
    with running_server(app) as url, EnvClient(url).sync() as env:
        env.reset()
        assert env.step({"sleep_s": 3.0, "amount": 7}).observation["total"] == 7


def test_graceful_shutdown_closes_sockets_with_1001_and_envs(tmp_path: Path) -> None:
    marker = tmp_path / "closed.txt"
    with ServedProcess(COUNTER, "--max-concurrent-envs", "4",
                       env=subprocess_env(ENVKIT_TEST_CLOSE_MARKER=str(marker))) as served:
        clients = [EnvClient(served.url).sync() for _ in range(3)]
        for client in clients:
            client.reset()
        served.terminate()
    for client in clients:
        with pytest.raises(SessionLostError) as lost:
            client.step({"amount": 1})
        assert lost.value.close_code == 1001 and "shut" in lost.value.reason
    assert marker.read_text().count("closed") == 3


def test_a_client_that_vanishes_is_dropped_by_the_server_keepalive(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The network to a client dies silently (no FIN, no RST): the server's pings go unanswered, so it ends the
    session, runs env.close() and frees the slot, long before the idle timeout (300 s here). The pong timeout is
    longer than the ping interval."""
    marker = tmp_path / "closed.txt"
    monkeypatch.setenv("ENVKIT_TEST_CLOSE_MARKER", str(marker))
    app = create_app(CounterEnvironment, CounterAction, CounterObservation, max_concurrent_envs=2,
                     ping_interval_s=0.5, ping_timeout_s=1.5)
    with running_server(app) as url, FreezableProxy(url) as proxy, \
            connect(websocket_url(proxy.url), proxy=None, ping_interval=None, close_timeout=0.5) as sock:
        sock.send('{"type": "reset"}')
        sock.recv(timeout=10)
        assert EnvClient(url).sync().health()["active_sessions"] == 1
        proxy.freeze()
        deadline = time.monotonic() + 15
        while EnvClient(url).sync().health()["active_sessions"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert EnvClient(url).sync().health()["active_sessions"] == 0, "the vanished client still holds its slot"
        assert marker.read_text().count("closed") == 1


def test_a_quiet_client_that_answers_pings_keeps_its_session() -> None:
    app = create_app(CounterEnvironment, CounterAction, CounterObservation, max_concurrent_envs=2,
                     ping_interval_s=1.0, ping_timeout_s=1.0)
    with running_server(app) as url, EnvClient(url, ping_interval=None).sync() as env:
        env.reset()
        time.sleep(3.5)   # several ping rounds with no message from the client; its WebSocket layer answers them
        assert env.step({"amount": 3}).observation["total"] == 3


def test_network_cut_is_detected_by_keepalive(echo_url: str) -> None:
    with FreezableProxy(echo_url) as proxy:
        env = EnvClient(proxy.url, ping_interval=0.3, ping_timeout=1.0, message_timeout=120).sync()
        env.reset()
        proxy.freeze()
        with pytest.raises(SessionLostError) as lost:
            env.step({"message": "into the void"})
        assert "no reply within" not in lost.value.reason   # keepalive noticed, not the message timeout
        with pytest.raises(SessionLostError):
            env.state()
