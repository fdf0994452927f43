"""Access control on a real server: API keys, Origin and Host checks, per-client session limits.

Every request goes over real sockets to a server on 127.0.0.1; the CLI cases run `envkit` in real
subprocesses.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any, Iterator

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from envkit import AuthenticationError, CapacityError, ConfigurationError, EnvClient, create_app
from envkit.core.access import AccessPolicy
from envkit.app.targets import resolve_target
from envkit.testing import ServedProcess, running_server
from test_ors_clients import openreward_python  # noqa: F401 — a fixture (the SDK's own venv)


KEY = "test-key-7f3a9c0e51"


def echo_app(**access: Any) -> Any:
    target = resolve_target("echo")
    return create_app(target.env_class, target.action_cls, target.observation_cls, max_concurrent_envs=8, **access)


@pytest.fixture
def keyed_url() -> Iterator[str]:
    with running_server(echo_app(api_keys=[KEY])) as url:
        yield url


def ws(url: str) -> str:
    return url.replace("http://", "ws://") + "/ws"


async def handshake(url: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """Open /ws with `headers`: (101, {}) when accepted (then closed at once), else the refusal's status and body."""
    try:
        async with connect(ws(url), additional_headers=headers, proxy=None) as socket:
            await socket.send('{"type":"reset"}')
            assert json.loads(await socket.recv())["type"] == "observation"
            return 101, {}
    except InvalidStatus as error:
        return error.response.status_code, json.loads(error.response.body or b"{}")


async def handshake_as_host(url: str, host: str) -> tuple[int, dict[str, Any]]:
    """A WebSocket handshake naming `host` in its Host header (as a page reached by another name sends it)."""
    port = int(url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    status = int(head.split(" ", 2)[1])
    length = next((int(line.split(":", 1)[1]) for line in head.split("\r\n") if line.lower().startswith("content-length")), 0)
    body = await reader.readexactly(length) if length else b""
    writer.close()
    return status, json.loads(body) if body else {}


# -- API keys ------------------------------------------------------------------------------------


def test_without_a_key_every_route_but_health_answers_401_with_the_reason(keyed_url: str) -> None:
    assert httpx.get(keyed_url + "/health").status_code == 200
    for path in ("/metadata", "/schema", "/tools", "/no-such-route"):
        answer = httpx.get(keyed_url + path)
        assert answer.status_code == 401, path
        body = answer.json()
        assert body["reason"] == "missing_api_key" and "X-API-Key" in body["detail"]
        assert body["accepted"][:2] == ["X-API-Key: <key>", "Authorization: Bearer <key>"]
        assert answer.headers["www-authenticate"].startswith("Bearer")


def test_the_web_page_files_load_without_a_key_and_its_data_needs_one(keyed_url: str) -> None:
    """A person must be able to open the page to type the key in; what the page then reads is guarded."""
    assert httpx.get(keyed_url + "/web").status_code == 200
    assert httpx.get(keyed_url + "/web/static/main.js").status_code == 200
    for path in ("/web/reset-arguments", "/web/static/../../metadata", "/metadata"):
        assert httpx.get(keyed_url + path).status_code == 401, path
    assert httpx.get(keyed_url + "/web/reset-arguments", cookies={"envkit_api_key": KEY}).status_code in (200, 404)


def test_a_wrong_key_is_refused_and_never_echoed(keyed_url: str) -> None:
    answer = httpx.get(keyed_url + "/metadata", headers={"X-API-Key": "not-the-key"})
    assert answer.status_code == 401 and answer.json()["reason"] == "wrong_api_key"
    assert "not-the-key" not in answer.text and KEY not in answer.text
    assert httpx.get(keyed_url + "/metadata", headers={"Authorization": f"Basic {KEY}"}).status_code == 401


@pytest.mark.parametrize("headers", [{"X-API-Key": KEY}, {"Authorization": f"Bearer {KEY}"},
                                     {"Cookie": f"theme=dark; envkit_api_key={KEY}"}],
                         ids=["x-api-key", "bearer", "cookie"])
def test_each_accepted_form_of_the_key_opens_http_and_websocket(keyed_url: str, headers: dict[str, str]) -> None:
    assert httpx.get(keyed_url + "/tools", headers=headers).status_code == 200
    assert asyncio.run(handshake(keyed_url, headers))[0] == 101


@pytest.mark.parametrize("headers,reason", [({}, "missing_api_key"), ({"X-API-Key": "wrong"}, "wrong_api_key")])
def test_a_websocket_without_the_key_is_refused_at_the_handshake_and_never_accepted(
        keyed_url: str, headers: dict[str, str], reason: str) -> None:
    status, body = asyncio.run(handshake(keyed_url, headers))
    assert status == 401 and body["reason"] == reason
    health = httpx.get(keyed_url + "/health").json()
    assert health["active_sessions"] == 0   # no slot was taken, no environment built


def test_the_client_raises_authentication_error_saying_how_to_give_a_key(keyed_url: str) -> None:
    with pytest.raises(AuthenticationError, match="needs an API key and none was sent.*api_key=") as missing:
        with EnvClient(keyed_url, api_key="").sync() as env:
            env.reset()
    assert missing.value.status == 401 and missing.value.refusal == "missing_api_key"
    with pytest.raises(AuthenticationError, match="refused the API key that was sent"):
        EnvClient(keyed_url, api_key="wrong").sync().metadata()
    with EnvClient(keyed_url, api_key=KEY).sync() as env:
        assert env.reset().observation["echoed_message"]
        assert env.metadata()["access"]["api_key_required"] is True


def test_the_client_takes_the_key_from_envkit_api_key(keyed_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVKIT_API_KEY", KEY)
    with EnvClient(keyed_url).sync() as env:
        env.reset()
        assert env.step({"message": "hi"}).observation["echoed_message"] == "hi"


def test_the_server_reads_envkit_api_key_and_metadata_never_shows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVKIT_API_KEY", KEY)
    with running_server(echo_app()) as url:
        assert httpx.get(url + "/metadata").status_code == 401
        answer = httpx.get(url + "/metadata", headers={"X-API-Key": KEY})
    assert answer.json()["access"]["api_key_required"] is True and KEY not in answer.text
    with running_server(echo_app(api_keys=[])) as url:   # [] overrides the environment
        assert httpx.get(url + "/metadata").json()["access"]["api_key_required"] is False


def test_metadata_lists_the_protections() -> None:
    app = echo_app(api_keys=[KEY, "second-key"], allowed_origins=["https://app.example.com"])
    with running_server(app) as url:
        access = httpx.get(url + "/metadata", headers={"X-API-Key": "second-key"}).json()["access"]
    assert access["allowed_origins"] == ["same origin", "https://app.example.com"]
    assert access["allowed_hosts"] == ["127.0.0.1", "localhost", "::1"] and access["open_paths"] == ["/", "/health", "/web", "/web/", "/web/static/*"]
    assert KEY not in json.dumps(access) and "second-key" not in json.dumps(access)


# -- Origin --------------------------------------------------------------------------------------


def test_a_cross_origin_page_is_refused_unless_allowed() -> None:
    with running_server(echo_app(allowed_origins=["https://app.example.com"])) as url:
        status, body = asyncio.run(handshake(url, {"Origin": "https://evil.example"}))
        assert status == 403 and body["reason"] == "origin_not_allowed" and "--allow-origin" in body["detail"]
        assert httpx.get(url + "/tools", headers={"Origin": "https://evil.example"}).status_code == 403
        assert asyncio.run(handshake(url, {"Origin": "https://app.example.com"}))[0] == 101
        allowed = httpx.get(url + "/tools", headers={"Origin": "https://app.example.com"})
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == "https://app.example.com"
        preflight = httpx.request("OPTIONS", url + "/tools", headers={
            "Origin": "https://app.example.com", "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "x-api-key"})
        assert preflight.status_code == 204 and "x-api-key" in preflight.headers["access-control-allow-headers"]
        assert httpx.request("OPTIONS", url + "/tools", headers={
            "Origin": "https://evil.example", "Access-Control-Request-Method": "GET"}).status_code == 403
        assert asyncio.run(handshake(url, {}))[0] == 101   # no Origin: not a browser, unaffected


def test_a_same_origin_page_always_works(echo_url: str) -> None:
    port = echo_url.rsplit(":", 1)[1]
    assert asyncio.run(handshake(echo_url, {"Origin": f"http://127.0.0.1:{port}"}))[0] == 101
    assert asyncio.run(handshake(echo_url, {"Origin": f"http://127.0.0.1:{int(port) + 1}"}))[0] == 403


# -- Host ----------------------------------------------------------------------------------------


def test_a_loopback_server_refuses_other_host_names(echo_url: str) -> None:
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: the Host header gives it away."""
    answer = httpx.get(echo_url + "/metadata", headers={"Host": "rebind.evil.example"})
    assert answer.status_code == 403 and answer.json()["reason"] == "host_not_allowed"
    assert "--allowed-hosts" in answer.json()["detail"]
    status, body = asyncio.run(handshake_as_host(echo_url, "rebind.evil.example:80"))
    assert status == 403 and body["reason"] == "host_not_allowed"
    port = echo_url.rsplit(":", 1)[1]
    assert httpx.get(echo_url + "/metadata", headers={"Host": f"localhost:{port}"}).status_code == 200
    assert asyncio.run(handshake_as_host(echo_url, f"localhost:{port}"))[0] == 101


def test_allowed_hosts_replace_the_loopback_default() -> None:
    with running_server(echo_app(allowed_hosts=["env.example.com", "*.corp.example"])) as url:
        assert httpx.get(url + "/tools", headers={"Host": "env.example.com"}).status_code == 200
        assert httpx.get(url + "/tools", headers={"Host": "a.corp.example:8443"}).status_code == 200
        assert httpx.get(url + "/tools", headers={"Host": "127.0.0.1"}).status_code == 403


# -- fair share ----------------------------------------------------------------------------------


def test_one_client_address_holds_at_most_its_share() -> None:
    """Clients are told apart by X-Forwarded-For from a trusted proxy (127.0.0.1 here, standing in for one)."""
    app = echo_app(max_sessions_per_client=2, forwarded_allow_ips=["127.0.0.1"])
    with running_server(app) as url:
        alice = [EnvClient(url, headers={"X-Forwarded-For": "203.0.113.7"}).sync() for _ in range(3)]
        alice[0].reset(), alice[1].reset()
        with pytest.raises(CapacityError, match="per-client limit reached: 203.0.113.7 already holds 2 of the 2"):
            alice[2].reset()
        with EnvClient(url, headers={"X-Forwarded-For": "198.51.100.1"}).sync() as bob:
            assert bob.reset().observation is not None
        alice[0].close()
        assert alice[2].reset().observation is not None      # a closed session gives the share back
        assert httpx.get(url + "/metadata").json()["max_sessions_per_client"] == 2
        for client in alice:
            client.close()


def test_the_client_address_behind_proxies() -> None:
    policy = AccessPolicy(forwarded_allow_ips=["private"])
    chain = {"x-forwarded-for": "6.6.6.6, 203.0.113.9, 10.1.2.3"}   # spoofed entry, the client, an inner proxy
    assert policy.client_address("10.0.0.1", chain) == "203.0.113.9"
    assert policy.client_address("203.0.113.50", chain) == "203.0.113.50"   # not a trusted proxy: its header is ignored
    assert AccessPolicy().client_address("10.0.0.1", chain) == "10.0.0.1"
    with pytest.raises(ConfigurationError, match="not an IP address"):
        AccessPolicy(forwarded_allow_ips=["proxy.example"])


# -- the command line ----------------------------------------------------------------------------


def envkit(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envkit.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture
def keyed_server() -> Iterator[ServedProcess]:
    with ServedProcess("echo", "--api-key-env", "ECHO_KEY", "--log-level", "debug",
                       env={"ECHO_KEY": KEY}) as served:
        yield served


def test_cli_clients_report_a_refused_key_in_one_line(keyed_server: ServedProcess) -> None:
    url = keyed_server.url
    without = {"ENVKIT_API_KEY": ""}
    for command in (["validate", url], ["bench", "--url", url, "--sessions", "1", "--steps", "1", "--quiet"]):
        done = envkit(*command, env=without)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "needs an API key and none was sent" in done.stderr
        done = envkit(*command, "--api-key-env", "ECHO_WRONG", env={"ECHO_WRONG": "nope"})
        assert done.returncode == 1 and "refused the API key that was sent" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    done = envkit("validate", url, "--api-key-env", "ECHO_KEY", env={"ECHO_KEY": KEY})
    assert done.returncode == 0, done.stdout + done.stderr
    done = envkit("validate", url, env={"ENVKIT_API_KEY": KEY})
    assert done.returncode == 0, done.stdout + done.stderr
    assert KEY not in "".join(keyed_server.output)   # debug logs included: the key is never logged


def test_eval_reports_a_refused_key_in_one_line(keyed_server: ServedProcess) -> None:
    command = ("eval", "--env", "echo", "--env-url", keyed_server.url, "--policy", "random", "--games", "2")
    done = envkit(*command, env={"ENVKIT_API_KEY": ""})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "needs an API key and none was sent" in done.stderr.strip().splitlines()[-1]
    done = envkit(*command, "--api-key-env", "ECHO_KEY", env={"ECHO_KEY": KEY})
    assert done.returncode == 0, done.stdout + done.stderr


def test_train_reports_a_refused_key_in_one_line(keyed_server: ServedProcess) -> None:
    done = envkit("train", "--env", "echo", "--env-url", keyed_server.url, "--max-steps", "1", "-q",
                  env={"ENVKIT_API_KEY": ""}, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "needs an API key and none was sent" in done.stderr.strip().splitlines()[-1]


def test_serve_refuses_an_unset_key_variable() -> None:
    done = envkit("serve", "echo", "--api-key-env", "ENVKIT_NO_SUCH_VARIABLE")
    assert done.returncode == 2 and "ENVKIT_NO_SUCH_VARIABLE is not set or empty" in done.stderr


def test_the_per_client_share_counts_sessions_of_every_surface() -> None:
    """An Open Reward Standard session and a /ws session of one client draw on the same share (uvicorn serves both)."""
    app = echo_app(max_sessions_per_client=1, forwarded_allow_ips=["127.0.0.1"])
    carol = {"X-Forwarded-For": "192.0.2.44"}
    with running_server(app) as url, httpx.Client(base_url=url, headers=carol) as http:
        sid = "a" * 32
        assert http.post("/create", headers={"X-Session-ID": sid}, json={"task_spec": {}}).status_code == 200
        second = http.post("/create", headers={"X-Session-ID": "b" * 32}, json={"task_spec": {}})
        assert second.status_code == 429 and "per-client limit reached: 192.0.2.44" in second.text
        with pytest.raises(CapacityError, match="per-client limit reached"):
            EnvClient(url, headers=carol).sync().reset()
        assert http.post("/delete_session", headers={"X-Session-ID": sid}).status_code == 200
        with EnvClient(url, headers=carol).sync() as env:
            assert env.reset().observation is not None


def test_refusals_are_counted_by_reason_in_metrics(keyed_url: str) -> None:
    httpx.get(keyed_url + "/tools")
    httpx.get(keyed_url + "/tools", headers={"X-API-Key": "wrong"})
    asyncio.run(handshake(keyed_url, {"Origin": "https://evil.example", "X-API-Key": KEY}))
    text = httpx.get(keyed_url + "/metrics", headers={"X-API-Key": KEY}).text
    for reason in ("missing_api_key", "wrong_api_key", "origin_not_allowed"):
        assert f'envkit_refusals_total{{reason="{reason}"}} 1' in text, text
    assert KEY not in text


# -- the uvicorn-only surfaces: /mcp and the Open Reward Standard ---------------------------------


def test_an_allowed_origin_reaches_mcp_and_a_foreign_one_does_not() -> None:
    """/mcp has no Origin rule of its own: the one access layer decides, allowed origins included."""
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    with running_server(echo_app(allowed_origins=["https://app.example.com"])) as url:
        allowed = httpx.post(url + "/mcp", json=call, headers={"Origin": "https://app.example.com"})
        assert allowed.status_code == 200 and allowed.json()["result"]["tools"]
        foreign = httpx.post(url + "/mcp", json=call, headers={"Origin": "https://evil.example"})
        assert foreign.status_code == 403 and foreign.json()["reason"] == "origin_not_allowed"


def test_the_openreward_sdk_plays_with_its_key_and_is_refused_without(openreward_python: str) -> None:
    """The real openreward SDK, which sends its key as X-API-Key."""
    from test_ors_clients import PEER, peer_env

    target = resolve_target("wordle")
    app = create_app(target.env_class, target.action_cls, target.observation_cls, env_name="wordle",
                     max_concurrent_envs=4, api_keys=[KEY])
    reports = []
    with running_server(app) as url:
        for key in ("", KEY):
            done = subprocess.run([openreward_python, str(PEER / "sdk_api_key.py"), url, "wordle"], capture_output=True,
                                  text=True, timeout=240, env={**peer_env(url), "OPENREWARD_API_KEY": key})
            assert done.returncode == 0, done.stderr[-3000:]
            reports.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert reports[0]["refused"] == 401
    assert reports[1]["prompt"] is True and "train" in reports[1]["splits"]
