"""Clients that spread sessions over several servers: real servers on 127.0.0.1, the real client."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Iterator

import httpx
import pytest
from conftest import subprocess_env
from sample_envs import CounterAction, CounterEnvironment, CounterObservation

from envkit import CapacityError, EnvClient, EnvConnectionError, SessionLostError, create_app
from envkit.client.placement import Placement, is_registry_url, parse_server_urls
from envkit.testing import ServedProcess, free_port, running_server

COUNTER = "sample_envs:CounterEnvironment"


@contextlib.contextmanager
def counter_servers(*limits: int) -> Iterator[list[str]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(running_server(create_app(CounterEnvironment, CounterAction, CounterObservation,
                                                             max_concurrent_envs=limit))) for limit in limits]


def test_parse_server_urls_accepts_lists_and_commas_and_explains_mistakes() -> None:
    assert parse_server_urls("http://a:1") == ["http://a:1"]
    assert parse_server_urls(" http://a:1, http://b:2,,http://a:1 ") == ["http://a:1", "http://b:2"]
    assert parse_server_urls(["http://a:1,http://b:2", "ws://c:3/ws"]) == ["http://a:1", "http://b:2", "ws://c:3/ws"]
    assert is_registry_url("http://head:8000/replicas/") and not is_registry_url("http://a:1")
    with pytest.raises(ValueError, match="no server URL given"):
        parse_server_urls(" , ")
    with pytest.raises(ValueError, match="separate several with commas"):
        parse_server_urls("http://a:1 http://b:2")
    with pytest.raises(ValueError, match="give it alone"):
        parse_server_urls("http://head:8000/replicas,http://a:1")


def test_new_sessions_go_to_the_least_loaded_server() -> None:
    with counter_servers(4, 8) as (small, large):
        clients = [EnvClient([small, large]).sync() for _ in range(6)]
        for client in clients:
            client.reset()
        placed = Counter(client.client.http_url for client in clients)
        # least loaded by share of slots: 2/4 and 4/8 once all six are open
        assert placed == {small: 2, large: 4}
        for client in clients:
            assert client.step({"amount": 3}).observation["total"] == 3
        health = clients[0].health()
        assert (health["active_sessions"], health["max_sessions"]) == (6, 12)
        assert [server["active_sessions"] for server in health["servers"]] == [2, 4]
        for client in clients:
            client.close()


def test_full_and_unreachable_servers_are_skipped_then_every_server_full_is_a_capacity_error() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with counter_servers(1, 2) as (one, two):
        placement = Placement([dead, one, two], ttl_s=60.0)   # a long cache: the refusals must be learnt
        first = EnvClient([dead, one, two]).sync()
        first.client.placement = placement
        others = []
        for _ in range(3):
            client = EnvClient([dead, one, two]).sync()
            client.client.placement = placement
            client.reset()
            others.append(client)
        assert sorted(Counter(client.client.http_url for client in others).values()) == [1, 2]
        with pytest.raises(CapacityError, match="every server is at capacity"):
            first.reset()
        down = [server for server in placement.servers.values() if not server.live]
        assert [server.url for server in down] == [dead]
        for client in others:
            assert client.step({"amount": 1}).observation["total"] == 1
            client.close()


def test_no_server_reachable_names_each_one() -> None:
    urls = [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"]
    with pytest.raises(EnvConnectionError, match="no live server accepted a session") as caught:
        EnvClient(urls, connect_timeout=2).sync().reset()
    assert all(url in str(caught.value) for url in urls)


def test_a_lost_server_ends_only_its_sessions_and_reset_lands_elsewhere() -> None:
    with ServedProcess(COUNTER, "--max-concurrent-envs", "8", env=subprocess_env()) as doomed, \
            counter_servers(8) as (survivor,):
        servers = [doomed.url, survivor]
        clients = [EnvClient(servers).sync() for _ in range(4)]
        for client in clients:
            client.reset()
            client.step({"amount": 2})
        on_doomed = [client for client in clients if client.client.http_url == doomed.url]
        on_survivor = [client for client in clients if client.client.http_url == survivor]
        assert len(on_doomed) == len(on_survivor) == 2
        doomed.kill()
        for client in on_doomed:
            with pytest.raises(SessionLostError):
                client.step({"amount": 1})
        for client in on_survivor:
            assert client.step({"amount": 1}).observation["total"] == 3
        for client in on_doomed:
            assert client.reset(tag="again").observation["tag"] == "again"
            assert client.client.http_url == survivor
        assert httpx.get(survivor + "/health").json()["active_sessions"] == 4
        for client in clients:
            client.close()


def test_bench_spreads_its_sessions_over_several_servers() -> None:
    from envkit.bench import run_load, run_sync

    with counter_servers(8, 8) as (first, second):
        result = run_sync(run_load(f"{first},{second}", 8, 3, action={"amount": 1}, client="websockets",
                                   on_open=lambda: _assert_split(first, second)))
    assert result.sessions_ok == 8 and result.steps == 24 and result.url == f"{first},{second}"


async def _assert_split(first: str, second: str) -> None:
    async with httpx.AsyncClient() as http:
        loads = [(await http.get(url + "/health")).json()["active_sessions"] for url in (first, second)]
    assert loads == [4, 4]


def test_bench_and_eval_commands_take_several_servers() -> None:
    import json
    import subprocess
    import sys

    with ServedProcess("catch", "--max-concurrent-envs", "16") as first, \
            ServedProcess("catch", "--max-concurrent-envs", "16") as second:
        both = f"{first.url},{second.url}"
        bench = subprocess.run([sys.executable, "-m", "envkit.cli", "bench", "--url", first.url, "--url", second.url,
                                "--sessions", "8", "--steps", "2", "--action", '{"action_id": 1}', "--json", "--quiet"],
                               capture_output=True, text=True, timeout=120)
        assert bench.returncode == 0, bench.stderr
        assert json.loads(bench.stdout)["sessions_ok"] == 8
        evaluated = subprocess.run([sys.executable, "-m", "envkit.cli", "eval", "--env", "catch", "--env-url", both,
                                    "--policy", "solver", "--json"], capture_output=True, text=True, timeout=300)
        assert evaluated.returncode == 0, evaluated.stderr
        opened = [_opened_total(httpx.get(url + "/metrics").text) for url in (first.url, second.url)]
    assert min(opened) >= 4, opened   # both servers had a share of the bench's sessions and of eval's episodes
    bad = subprocess.run([sys.executable, "-m", "envkit.cli", "bench", "--url", "http://a:1 http://b:2"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "separate several with commas" in bad.stderr and "Traceback" not in bad.stderr


def _opened_total(metrics: str) -> int:
    line = next(line for line in metrics.splitlines() if line.startswith("envkit_sessions_opened_total "))
    return int(float(line.split()[1]))


def test_registry_lists_live_servers_drops_gone_ones_and_refuses_bad_registrations() -> None:
    """The registry without Ray: a server registers over a real WebSocket, clients place sessions from the listing."""
    import time

    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    from envkit.scale.registry import Registry, create_registry_app

    registry = Registry(expected=1)
    with running_server(create_registry_app(registry)) as root, counter_servers(4) as (server,):
        register = root.replace("http://", "ws://") + "/register"
        for bad in ("not json", '{"port": 1}'):
            with connect(register) as socket:
                socket.send(bad)
                with pytest.raises(ConnectionClosed) as closed:
                    socket.recv(timeout=5)
            assert closed.value.rcvd.code == 1008 and "must describe the server" in closed.value.rcvd.reason
        with connect(register) as socket:
            socket.send(f'{{"url": "{server}", "replica": 0, "active_sessions": 0, "max_sessions": 4}}')
            deadline = time.monotonic() + 5
            while not registry.replicas and time.monotonic() < deadline:
                time.sleep(0.02)
            listing = httpx.get(root + "/replicas").json()
            assert [entry["url"] for entry in listing["replicas"]] == [server]
            assert (listing["max_sessions"], listing["live_replicas"]) == (4, 1)
            client = EnvClient(root + "/replicas").sync()
            assert client.reset(tag="placed").observation["tag"] == "placed" and client.client.http_url == server
            socket.send('{"active_sessions": 1}')
        deadline = time.monotonic() + 5   # the registration socket closed: the server is dropped
        while registry.replicas and time.monotonic() < deadline:
            time.sleep(0.02)
        assert httpx.get(root + "/replicas").json()["replicas"] == []
        assert client.step({"amount": 2}).observation["total"] == 2   # its open session is not the registry's
        time.sleep(1.1)   # past the process's cached listing (1 s)
        with pytest.raises(EnvConnectionError, match="no live server"):
            EnvClient(root + "/replicas").sync().reset()
        client.close()
    with pytest.raises(EnvConnectionError, match="the registry did not answer"):
        EnvClient(root + "/replicas", connect_timeout=2).sync().reset()


def test_servers_that_do_not_report_their_load_take_sessions_in_turn() -> None:
    """An OpenEnv-style `/health` (status only): a tiny FastAPI app stands in for it, with a real envkit server."""
    from fastapi import FastAPI

    status_only = FastAPI()

    @status_only.get("/health")
    async def health() -> dict:
        return {"status": "healthy"}

    with running_server(status_only) as one, running_server(status_only) as two:
        placement = Placement([one, two, f"http://127.0.0.1:{free_port()}"])
        summed = asyncio.run(placement.health())
    assert "max_sessions" not in summed and summed["status"] == "healthy"   # the whole's limit is unknown
    assert [server["max_sessions"] for server in summed["servers"][:2]] == [None, None]
    assert not summed["servers"][2]["live"]
    assert Counter(placement.assign(6)) == {one: 3, two: 3}


def test_training_episodes_spread_over_servers_and_a_lost_one_costs_only_its_episodes() -> None:
    """The class `envkit train` hands to TRL, bound to two servers (a comma-separated --env-url)."""
    from envkit.train import bind

    with ServedProcess(COUNTER, "--max-concurrent-envs", "8", env=subprocess_env()) as doomed, \
            counter_servers(8) as (survivor,):
        cls = bind(f"{doomed.url},{survivor}", reconnect_timeout=0)
        environments = [cls() for _ in range(4)]
        for environment in environments:
            environment.reset(tag="episode")
            environment.add(amount=1)
        loads = [health["active_sessions"] for health in (httpx.get(url + "/health").json()
                                                           for url in (doomed.url, survivor))]
        assert loads == [2, 2]
        doomed.kill()
        outcomes = []
        for environment in environments:
            try:
                outcomes.append(environment.add(amount=1))
            except ValueError as error:
                outcomes.append(str(error).split(":")[0])
        assert Counter(outcomes) == {'{"total": 2, "tag": "episode"}': 2, "Episode lost": 2}
        for environment in environments:   # the next episodes all land on the survivor
            assert environment.reset(tag="next").endswith('{"total": 0, "tag": "next"}')
        assert httpx.get(survivor + "/health").json()["active_sessions"] == 4
        cls._close_all()
