"""A sandbox's channel folder: the host's unix socket there is the one thing a sandbox with no network can reach.

On each backend this machine has (real bubblewrap; the real Docker engine; Landlock, which shows the folder where it
is rather than at /run/envkit: `Sandbox.channel`): two sandboxes, each with its own channel
folder and a real HTTP server on a unix socket in it (`scripted_model.ScriptedModel`), attacked from inside.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sandbox_helpers import BACKENDS, back_to, leftovers, require
from scripted_model import ScriptedModel, text_reply

from envkit.sandbox import (Sandbox, SandboxError, SandboxLimits, SandboxPathError, close_pools, open_sandbox,
                            start_with_channel)

LIMITS = SandboxLimits(wall_s=10)
#: Python run inside: an HTTP GET of /v1/models over the channel's socket; prints the status line.
GET_MODELS = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\n"
              "s.sendall(b'GET /v1/models HTTP/1.0\\r\\n\\r\\n')\nprint(s.recv(100).split(b'\\r\\n')[0].decode())\n")


@pytest.fixture
def folder() -> Iterator[str]:
    """A channel folder where sandboxes' uids may pass (pytest's tmp_path is below a folder closed to them)."""
    with tempfile.TemporaryDirectory() as made:
        yield made


@dataclass
class Channelled:
    sandbox: Sandbox
    folder: str
    model: ScriptedModel

    def run(self, command: str) -> tuple[int | None, str, str]:
        result = self.sandbox.run(command)
        return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module", params=BACKENDS)
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[Channelled, Channelled]]:
    """An attacker and a neighbour, each admitted to the socket in its own channel folder."""
    require(request.param)
    made = []
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        for folder in (one, two):
            model = ScriptedModel(f"{folder}/proxy.sock", "key", [text_reply("hi")] * 4).__enter__()
            sandbox = open_sandbox(request.param, limits=LIMITS, channel_dir=folder)
            sandbox.admit(f"{folder}/proxy.sock")
            made.append(Channelled(sandbox, folder, model))
        yield made[0], made[1]
        for each in made:
            each.sandbox.close()
            each.model.__exit__()
    close_pools()


def test_the_socket_answers_through_the_channel(pair: tuple[Channelled, Channelled]) -> None:
    for each in pair:
        exit_code, stdout, stderr = each.run(f"python3 -c \"{GET_MODELS}\" {each.sandbox.channel}/proxy.sock")
        assert (exit_code, stdout) == (0, "HTTP/1.0 200 OK\n"), stderr


def test_host_loopback_ports_and_abstract_sockets_are_unreachable(pair: tuple[Channelled, Channelled]) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0envkit-test-{os.getpid()}")
    abstract.listen()
    accepted: list[object] = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    port = listener.getsockname()[1]
    probe = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), 2); print('reached tcp')\n"
             "except OSError as error:\n    print(type(error).__name__)\n"
             f"s = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect('\\0envkit-test-{os.getpid()}'); print('reached abstract')\n"
             "except OSError as error:\n    print(type(error).__name__)\n")
    try:
        exit_code, stdout, stderr = pair[0].run(f"python3 -c \"{probe}\"")
    finally:
        listener.close()
        abstract.close()
    refusal = "PermissionError" if pair[0].sandbox.backend == "landlock" else "ConnectionRefusedError"   # no TCP socket
    assert stdout == f"{refusal}\n{refusal}\n", (stdout, stderr)
    assert accepted == []


def test_another_sandboxes_channel_is_not_visible(pair: tuple[Channelled, Channelled]) -> None:
    attacker, neighbour = pair
    exit_code, stdout, _ = attacker.run(f"ls {attacker.sandbox.channel}; ls {neighbour.folder} {attacker.folder}; "
                                        "find / -type s 2>/dev/null")
    if attacker.sandbox.backend == "landlock":     # its own folder is where the host has it; the neighbour's is shut
        assert stdout == f"proxy.sock\n{attacker.folder}:\nproxy.sock\n", stdout    # and / is not listable
    else:
        assert stdout == "proxy.sock\n/run/envkit/proxy.sock\n", stdout
    before = len(neighbour.model.requests)
    attacker.run(f"python3 -c \"{GET_MODELS}\" {neighbour.folder}/proxy.sock")
    assert len(neighbour.model.requests) == before


def test_the_channel_is_read_only_so_the_socket_cannot_be_swapped(pair: tuple[Channelled, Channelled]) -> None:
    attacker = pair[0]
    exit_code, _, stderr = attacker.run("rm -f /run/envkit/proxy.sock; ln -s /etc/shadow /run/envkit/evil; "
                                        "head -c 1M /dev/zero > /run/envkit/fill; mv /run/envkit/proxy.sock x"
                                        .replace("/run/envkit", attacker.sandbox.channel or ""))
    refused = stderr.count("Read-only file system") + stderr.count("Permission denied")
    assert exit_code != 0 and refused == 4, stderr
    assert os.listdir(attacker.folder) == ["proxy.sock"]
    assert Path(attacker.folder, "proxy.sock").is_socket()


def test_only_an_admitted_sandbox_connects(folder: str) -> None:
    """As root each sandbox runs as a host uid of its own: the socket is closed to it until `admit`."""
    require("local")
    with ScriptedModel(f"{folder}/proxy.sock", "key", []), \
            open_sandbox("local", limits=LIMITS, channel_dir=folder) as sandbox:
        if sandbox.host_uid is None:
            pytest.skip("not root: sandboxes run as this user, who owns the socket")
        before = sandbox.run(["python3", "-c", GET_MODELS, "/run/envkit/proxy.sock"])
        sandbox.admit(f"{folder}/proxy.sock")
        after = sandbox.run(["python3", "-c", GET_MODELS, "/run/envkit/proxy.sock"])
    assert "PermissionError" in before.stderr and after.stdout == "HTTP/1.0 200 OK\n", (before, after)


def test_admit_refuses_what_is_not_a_socket_in_the_channel(folder: str) -> None:
    require("local")
    inside, outside = Path(folder, "channel"), Path(folder, "outside")
    os.chmod(folder, 0o711)
    inside.mkdir()
    outside.mkdir()
    (inside / "file").write_text("x")
    (inside / "link.sock").symlink_to(outside / "real.sock")
    with ScriptedModel(str(outside / "real.sock"), "key", []), \
            open_sandbox("local", limits=LIMITS, channel_dir=str(inside)) as sandbox:
        with pytest.raises(SandboxPathError, match="not directly in the sandbox's channel folder"):
            sandbox.admit(str(outside / "real.sock"))
        with pytest.raises(SandboxError, match="is not a unix socket"):
            sandbox.admit(str(inside / "file"))
        with pytest.raises(SandboxError, match="is not a unix socket"):
            sandbox.admit(str(inside / "link.sock"))
        with pytest.raises(SandboxError, match="no socket at .*start the server"):
            sandbox.admit(str(inside / "proxy.sock"))
        assert (outside / "real.sock").stat().st_uid == os.geteuid()
    with open_sandbox("local", limits=LIMITS) as plain, pytest.raises(SandboxError, match="has no channel folder"):
        plain.admit(str(inside / "file"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bad_channel_folder_is_refused_in_one_line(backend: str, folder: str) -> None:
    require(backend)
    Path(folder, "file").write_text("x")
    Path(folder, "a,b").mkdir()
    for bad, said in (("missing", "is not a folder: make it first"), ("file", "is not a folder"),
                      ("a,b", "has a comma")):
        with pytest.raises(ValueError, match=said) as raised:
            open_sandbox(backend, channel_dir=f"{folder}/{bad}")
        assert "\n" not in str(raised.value)


def test_a_channel_below_a_closed_folder_is_refused_in_one_line(folder: str) -> None:
    """bubblewrap binds the folder by its path as the sandbox's own uid, which must be able to pass the folders above."""
    require("local")
    closed = Path(folder, "closed")
    closed.mkdir(mode=0o700)
    (closed / "channel").mkdir()
    if os.geteuid() != 0:
        pytest.skip("not root: sandboxes run as this user, who may pass")
    with pytest.raises(ValueError, match=r"inside '.*closed', which other users may not pass through") as raised:
        open_sandbox("local", channel_dir=str(closed / "channel"))
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_channel_sandboxes_are_never_taken_from_a_warm_pool(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm pool's sandboxes started before their session's folder existed: each channel sandbox is its own."""
    require(backend)
    monkeypatch.setenv("ENVKIT_SANDBOX_WARM", "2")
    close_pools()
    with open_sandbox(backend, limits=LIMITS):
        pass                                  # the pool of (backend, LIMITS) now fills
    try:
        for _ in range(3):
            with tempfile.TemporaryDirectory() as folder:
                Path(folder, "mark").write_text(folder)
                with open_sandbox(backend, limits=LIMITS, channel_dir=folder) as sandbox:
                    assert sandbox.channel_dir == os.path.realpath(folder)
                    assert sandbox.run(f"cat {sandbox.channel}/mark").stdout == folder
    finally:
        close_pools()


@pytest.mark.parametrize("backend", BACKENDS)
def test_nothing_is_left_after_channel_sandboxes_close(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    require(backend)
    monkeypatch.setenv("ENVKIT_SANDBOX_WARM", "0")
    close_pools()
    before = leftovers()       # this module's other sandboxes, still open
    with tempfile.TemporaryDirectory() as folder:
        with ScriptedModel(f"{folder}/proxy.sock", "key", []):
            boxes = [open_sandbox(backend, limits=LIMITS, channel_dir=folder) for _ in range(3)]
            for box in boxes:
                box.admit(f"{folder}/proxy.sock")
                box.run(f"python3 -c \"{GET_MODELS}\" {box.channel}/proxy.sock; sleep 600 &")
            assert leftovers()["processes"] > before["processes"]
            for box in boxes:
                box.close()
        assert back_to(before), (before, leftovers())
        assert os.listdir(folder) == []


def own_channels() -> set[str]:
    """This process's channel folders (named by their owner; other processes make theirs meanwhile)."""
    return {path.name for path in Path(tempfile.gettempdir()).glob(f"envkit-channel-*.*.{os.getpid()}.*-*")}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_channel_made_for_the_sandbox_goes_with_it(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """channel_dir=True: a fresh folder the sandbox sees at /run/envkit, removed when it closes, or when it cannot
    be started; a caller's folder stays the caller's (the test above). (No warm pool: docker keeps started
    sandboxes with folders of their own waiting.)"""
    require(backend)
    monkeypatch.setenv("ENVKIT_SANDBOX_WARM", "0")
    close_pools()
    before = own_channels()
    with open_sandbox(backend, limits=LIMITS, channel_dir=True) as sandbox:
        folder = sandbox.channel_dir
        assert folder is not None and os.path.isdir(folder) and sandbox.owns_channel
        Path(folder, "mark").write_text("seen")
        assert sandbox.run(f"cat {sandbox.channel}/mark").stdout == "seen"
    assert not os.path.exists(folder) and own_channels() == before

    def broken(made: str) -> Sandbox:
        raise SandboxError(f"no sandbox for {made}")

    with pytest.raises(SandboxError, match="no sandbox for"):
        start_with_channel(broken, True)
    assert own_channels() == before
    with pytest.raises(ValueError, match="a folder's path \\(or True") as raised:
        open_sandbox(backend, channel_dir=False)
    assert "\n" not in str(raised.value)


def test_forwarded_json_is_what_the_model_server_saw(pair: tuple[Channelled, Channelled]) -> None:
    """The socket carries whole HTTP exchanges: a POST from inside reaches the server as sent."""
    attacker = pair[0]
    post = ("import json, socket\nbody = json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': 'é' * 3000}]})"
            ".encode()\ns = socket.socket(socket.AF_UNIX)\ns.connect('/run/envkit/proxy.sock')\n"
            "s.sendall(b'POST /v1/chat/completions HTTP/1.0\\r\\nAuthorization: Bearer key\\r\\nContent-Length: '"
            " + str(len(body)).encode() + b'\\r\\n\\r\\n' + body)\nprint(s.recv(30).split(b'\\r\\n')[0].decode())\n")
    attacker.sandbox.write_file("post.py", post.replace("/run/envkit", attacker.sandbox.channel or ""))
    exit_code, stdout, stderr = attacker.run("python3 post.py")
    assert stdout == "HTTP/1.0 200 OK\n", stderr
    assert attacker.model.requests[-1]["messages"][0]["content"] == "é" * 3000
    assert json.dumps(attacker.model.requests[-1])
