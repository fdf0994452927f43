"""What every sandbox backend shares: limits, results, errors, and `Sandbox`, which talks to the supervisor inside.

A sandbox is one host process (bubblewrap, or `docker run -i`) whose process 1 inside is `supervisor.py`; the host
writes one JSON request a line to its stdin and reads one JSON answer a line from its stdout. Closing stdin ends the
supervisor,
and with it every process of the sandbox; so does the server's death, which closes that pipe too.
"""

from __future__ import annotations

import base64
import fcntl
import io
import json
import os
import select
import shutil
import stat
import subprocess
import tarfile
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence, TypeVar

from ..errors import EnvironmentLostError, EnvkitError

__all__ = ["SandboxLimits", "RunResult", "Sandbox", "SandboxError", "SandboxLostError", "SandboxPathError",
           "SandboxUnavailableError", "SandboxBusyError", "clip"]

T = TypeVar("T")

#: The work folder as commands see it.
WORKDIR = "/work"
#: Where a sandbox opened with a channel folder sees it (read-only): the one way out of a sandbox with no network.
CHANNEL = "/run/envkit"
#: Seconds the host waits past a command's own timeout before it gives up on the supervisor and ends the sandbox.
GRACE_S = 5.0
#: Seconds a new sandbox may take to say it is ready.
START_TIMEOUT_S = 60.0


class SandboxError(EnvkitError, RuntimeError):
    """A sandbox could not do what was asked (it is closed, was ended, or an OS error inside)."""


class SandboxLostError(SandboxError, EnvironmentLostError):
    """The sandbox died or stopped answering (its container was removed, its supervisor killed): its files are gone.
    Raised from an environment's tool, it ends the session, whose client gets `SessionLostError`."""


class SandboxPathError(SandboxError, ValueError):
    """A file path that leads outside the work folder, through a symlink out, or to something not a file."""


class SandboxUnavailableError(SandboxError):
    """No backend can run here; the message names what to install or start."""


class SandboxBusyError(SandboxError):
    """Sandboxes are asked for faster than this process's creation rate allows, for longer than a start may wait."""


@dataclass(frozen=True)
class SandboxLimits:
    """What one sandbox may use. Time limits are per command; the others hold for the whole sandbox."""

    wall_s: float = 10.0
    cpu_s: float = 10.0
    memory_mb: int = 512
    processes: int = 64
    output_bytes: int = 1_000_000
    disk_mb: int = 256

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive number; got {value!r}")


@dataclass(frozen=True)
class RunResult:
    """How a command ended. `exit_code` is None when the wall timeout ended it, negative when a signal did."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    duration_s: float

    @property
    def ok(self) -> bool:
        """The command exited with 0 in time."""
        return self.exit_code == 0 and not self.timed_out


#: Memory the supervisor takes beside the commands', added to a sandbox's memory cgroup.
OVERHEAD_MB = 64


def total_memory_mb(limits: SandboxLimits) -> int:
    """A whole sandbox's memory cgroup: its processes' memory, its two tmpfs (work folder and /tmp), the supervisor."""
    return limits.memory_mb + 2 * limits.disk_mb + OVERHEAD_MB


def once(make: Callable[[], T]) -> Callable[[], T]:
    """`make()`'s result, made by the first caller while any others wait (a backend's checks run once)."""
    lock = threading.Lock()
    made: list[T] = []

    def get() -> T:
        with lock:
            if not made:
                made.append(make())
            return made[0]
    return get


class Uids:
    """Host uids for sandboxes: a block per server process, one uid per open sandbox, so that no two sandboxes
    share a process count (RLIMIT_NPROC is per uid) or may signal each other.

    A process claims its block with a lock (`lockf`, held while it lives, released by the kernel when it dies) on a
    file of `FOLDER` per block, starting from its pid's: no two processes of this machine that share `FOLDER` hold
    the same block at once, whatever their pids. The file holds the claimant's pid, for tests counting what a
    server's sandboxes run."""

    BASE, PER_SERVER, BLOCKS = 1_000_000, 1024, 4096
    FOLDER = Path(tempfile.gettempdir()) / "envkit-uids"

    def __init__(self) -> None:
        self._taken: set[int] = set()
        self._lock = threading.Lock()
        self._claim: tuple[int, int, int] | None = None    # (pid, block, fd)

    @property
    def base(self) -> int:
        """The first uid of this process's block (claimed at first use; a forked worker claims a block of its own)."""
        with self._lock:
            return self.BASE + self._block() * self.PER_SERVER

    def _block(self) -> int:
        if self._claim is not None and self._claim[0] == os.getpid():
            return self._claim[1]
        self._taken.clear()       # a forked worker's: its parent's sandboxes are not its own
        self.FOLDER.mkdir(mode=0o755, exist_ok=True)
        for step in range(self.BLOCKS):
            block = (os.getpid() + step) % self.BLOCKS
            fd = os.open(self.FOLDER / f"{block}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            self._claim = (os.getpid(), block, fd)
            return block
        raise SandboxUnavailableError(f"all {self.BLOCKS} blocks of sandbox uids are held by live processes")

    def take(self) -> int:
        with self._lock:
            first = self.BASE + self._block() * self.PER_SERVER
            for uid in range(first, first + self.PER_SERVER):
                if uid not in self._taken:
                    self._taken.add(uid)
                    return uid
        raise SandboxUnavailableError(f"{self.PER_SERVER} sandboxes are open in this process, the most it holds")

    def give_back(self, uid: int) -> None:
        with self._lock:
            self._taken.discard(uid)


UIDS = Uids()


def _number(name: str, default: float) -> float:
    value = os.environ.get(name, str(default))
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not number >= 0:
        raise ValueError(f"{name} must be a number of 0 or more; got {value!r}")
    return number


class CreationRate:
    """A token bucket over sandbox starts (as the generic cell rate algorithm: one time of next arrival kept)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0.0          # when the bucket would be empty were no start made from now on

    def _wait(self, rate: float) -> tuple[float, float]:
        """How long a start asked for now waits for its turn, and when the bucket is next empty after it."""
        interval, now = 1 / rate, time.monotonic()
        due = max(self._next, now)
        return due - max(1, int(rate)) * interval + interval - now, due + interval

    def free(self, default: float) -> bool:
        """Whether a start now would not wait (a warm pool refills only then: sessions' starts come first);
        `default`: the rate when `ENVKIT_SANDBOX_CREATE_RATE` is unset (the backend's `CREATE_RATE`)."""
        rate = _number("ENVKIT_SANDBOX_CREATE_RATE", default)
        with self._lock:
            return rate == 0 or self._wait(rate)[0] <= 0

    def admit(self, default: float) -> None:
        """Wait for this start's turn; `SandboxBusyError` if it would come later than the wait allowed."""
        rate = _number("ENVKIT_SANDBOX_CREATE_RATE", default)
        limit = _number("ENVKIT_SANDBOX_CREATE_WAIT_S", 60)
        if rate == 0:
            return
        with self._lock:
            wait, after = self._wait(rate)
            if wait > limit:
                raise SandboxBusyError(
                    f"the sandbox engine is saturated: starts are limited to {rate:g} a second "
                    f"(ENVKIT_SANDBOX_CREATE_RATE) and this one would wait {wait:.1f} s, more than "
                    f"ENVKIT_SANDBOX_CREATE_WAIT_S={limit:g}; open fewer sandboxes at once, or raise either")
            self._next = after
        if wait > 0:
            time.sleep(wait)


#: A sandbox start waits its turn under this process's creation rate: at most `ENVKIT_SANDBOX_CREATE_RATE` a second
#: (0 for no limit; unset, the backend's `CREATE_RATE`: 10 for containers, none for local processes), in bursts of up to one second's worth, waiting at most `ENVKIT_SANDBOX_CREATE_WAIT_S`
#: (default 60) before `SandboxBusyError`: engines fail at tens of parallel container starts, and hosted ones limit
#: creation to a few a second.
CREATION_RATE = CreationRate()


#: The supervisor's command line: it reads its own source as the first line of its stdin (a JSON string).
BOOTSTRAP = "import sys, json; exec(json.loads(sys.stdin.buffer.readline()))"


@cache
def supervisor_source() -> str:
    return (Path(__file__).parent / "supervisor.py").read_text()


@cache
def _spawner() -> ThreadPoolExecutor:
    """The one thread that starts sandbox processes. bubblewrap's `--die-with-parent` ties a sandbox to the thread
    that started it; this thread lives as long as the process, so a sandbox never dies with a worker thread."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="envkit-sandbox-spawn")


def share(path: str, uid: int | None, other_bits: int) -> None:
    """Make `path` reachable by a sandbox whose processes run as host `uid` (None: as this process): owned by that
    uid when this process may give it away (root), else `other_bits` added for everyone. Never follows a symlink."""
    if uid is None or uid == os.geteuid():
        return
    if os.geteuid() == 0:
        os.chown(path, uid, -1, follow_symlinks=False)
    else:
        os.chmod(path, os.lstat(path).st_mode & 0o7777 | other_bits)


def relative_path(path: str, workdir: str = WORKDIR) -> str:
    """`path` relative to the work folder; refuses `..`, absolute paths outside it and empty paths (the supervisor
    then refuses symlinks that lead out)."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise SandboxPathError(f"a file path must be a non-empty string; got {path!r}")
    if path.startswith("/") and path != workdir and not path.startswith(workdir + "/"):
        raise SandboxPathError(f"{path!r} is outside the work folder {workdir}; give a path inside it")
    if ".." in path.split("/"):
        raise SandboxPathError(f"{path!r} contains '..'; give a path inside the work folder {workdir}")
    return path[len(workdir):].lstrip("/") or "." if path.startswith("/") else path


class Sandbox:
    """One session's isolated place to run commands, with a private work folder at `workdir`.

    Backends subclass it and say how to start the host process (`_argv`, `_before_exec`) and what to remove
    after it (`_cleanup`). Not for concurrent use from several threads (calls are serialised).
    """

    backend: ClassVar[str]
    workdir: str = WORKDIR
    #: File requests stay inside `workdir` and commands start under the limits' rlimits; a sandbox that is its user's
    #: whole world (a task's container) is neither: any path is reachable and its processes keep the engine's
    #: per-process limits, as harbor's task containers do (its cgroups bound memory and processes).
    confined: bool = True
    #: Starts a second when `ENVKIT_SANDBOX_CREATE_RATE` is unset (0: no limit); an engine's backend sets one.
    CREATE_RATE: ClassVar[float] = 0.0

    def __init__(self, limits: SandboxLimits, channel_dir: str | None = None) -> None:
        self.limits = limits
        #: The host folder the sandbox sees at `CHANNEL`, or None; removed at close when the sandbox owns it.
        self.channel_dir = channel_dir
        self.owns_channel = False
        self._uid: int | None = None
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._pending = bytearray()
        self._closed = False
        self._broken: str | None = None

    # -- what a backend provides

    def _argv(self, agent: list[str]) -> list[str]:
        """The host command that runs `agent` (the supervisor's command line) inside the sandbox."""
        raise NotImplementedError

    def _before_exec(self) -> None:
        """Runs in the child between fork and exec (joins cgroups, drops privileges); default nothing."""

    def _cleanup(self) -> None:
        """Remove what the sandbox left on the host once its process has ended; default nothing."""

    def _options(self) -> dict[str, Any]:
        """What the supervisor is told at start (its second argument)."""
        return {"workdir": self.workdir, "confined": self.confined, "rlimits": self.confined}

    def _environment(self) -> dict[str, str] | None:
        """The supervisor's environment variables; default this process's (a backend's wrapper clears them)."""
        return None

    def _supervisor_source(self) -> str:
        """The source the supervisor's bootstrap runs."""
        return supervisor_source()

    def _ready(self, answer: dict[str, Any]) -> None:
        """Read what the supervisor said when it became ready; default nothing."""

    @property
    def channel(self) -> str | None:
        """Where commands inside see the channel folder, or None without one."""
        return CHANNEL if self.channel_dir is not None else None

    @property
    def host_uid(self) -> int | None:
        """The host uid the sandbox's processes run as, when it has one of its own (None: this process's)."""
        return self._uid

    def admit(self, path: str) -> None:
        """Let this sandbox's processes connect to the unix socket at `path`, in its channel folder (a socket the
        host made there after the sandbox opened, such as a proxy's; it keeps its other permissions)."""
        if self.channel_dir is None:
            raise SandboxError("this sandbox has no channel folder: open it with open_sandbox(channel_dir=...)")
        if os.path.realpath(os.path.dirname(os.path.abspath(path))) != os.path.realpath(self.channel_dir):
            raise SandboxPathError(f"{path!r} is not directly in the sandbox's channel folder {self.channel_dir}")
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            raise SandboxError(f"no socket at {path}: start the server that listens there first") from None
        if not stat.S_ISSOCK(found.st_mode):
            raise SandboxError(f"{path} is not a unix socket")
        share(path, self.host_uid, stat.S_IWOTH)

    # -- life

    def start(self) -> Sandbox:
        """Start the sandbox's process; `wait_ready` then waits for the supervisor's first line."""
        argv = self._argv(["python3", "-I", "-S", "-c", BOOTSTRAP, json.dumps(asdict(self.limits)),
                           json.dumps(self._options())])
        try:
            CREATION_RATE.admit(self.CREATE_RATE)
            if self.channel_dir is not None:
                share(self.channel_dir, self.host_uid, stat.S_IXOTH)
            self._process = _spawner().submit(
                subprocess.Popen, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True, preexec_fn=self._before_exec, env=self._environment()).result()
            self._process.stdin.write(json.dumps(self._supervisor_source()).encode() + b"\n")
            self._process.stdin.flush()
        except BaseException:
            self.close()
            raise
        return self

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> Sandbox:
        answer = self._read_answer(time.monotonic() + timeout_s)
        if answer is None or not answer.get("ready"):
            assert self._process is not None and self._process.stderr is not None
            self._kill()
            self._process.wait()
            said = (answer or {}).get("message") or self._process.stderr.read(4096).decode(errors="replace").strip()
            self.close()
            raise SandboxError(f"the {self.backend} sandbox did not start: {said or f'no answer in {timeout_s:g}s'}")
        self._ready(answer)
        return self

    @property
    def alive(self) -> bool:
        return not self._closed and self._broken is None and self._process is not None and self._process.poll() is None

    def close(self) -> None:
        """End every process of the sandbox and remove its work folder (and its channel folder, when its own);
        idempotent. A command still running (on another thread) is ended at once; its caller gets a SandboxError."""
        if not self._lock.acquire(blocking=False):
            self._broken = "the sandbox was closed while the command ran"
            if self._process is not None:
                self._kill()
            self._lock.acquire()
        try:
            if self._closed:
                return
            self._closed = True
            self._end_process()
            if self.owns_channel and self.channel_dir is not None:
                shutil.rmtree(self.channel_dir, ignore_errors=True)
        finally:
            self._lock.release()

    def _end_process(self) -> None:
        process = self._process
        if process is not None:
            try:
                process.stdin.close()      # the supervisor exits on EOF; process 1 gone ends the namespace
            except OSError:
                pass
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._kill()
                process.wait()
            process.stdout.close()
            process.stderr.close()
        self._cleanup()

    def _kill(self) -> None:
        """End the sandbox at once (its supervisor stopped answering)."""
        assert self._process is not None
        try:
            os.killpg(self._process.pid, 9)
        except ProcessLookupError:
            pass

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True) and getattr(self, "_process", None) is not None:
            self.close()

    # -- requests

    def run(self, command: str | Sequence[str], *, timeout_s: float | None = None,
            stdin: str | bytes | None = None, env: dict[str, str] | None = None) -> RunResult:
        """Run `command` (a string through `/bin/sh -c`, or an argument list) in the work folder, with `env` added
        to the sandbox's environment variables."""
        if isinstance(command, str):
            argv = ["/bin/sh", "-c", command]
        elif command and all(isinstance(part, str) for part in command):
            argv = list(command)
        else:
            raise ValueError(f"a command is a string or a non-empty list of strings; got {command!r}")
        if env is not None and not all(isinstance(key, str) and isinstance(value, str) for key, value in env.items()):
            raise ValueError(f"env maps names to string values; got {env!r}")
        return self._run({"argv": argv, "env": env}, timeout_s, stdin)

    def run_python(self, source: str, *, timeout_s: float | None = None,
                   stdin: str | bytes | None = None) -> RunResult:
        """Run Python `source` with the sandbox's `python3`, in the work folder."""
        if not isinstance(source, str):
            raise ValueError(f"Python source must be a string; got {type(source).__name__}")
        return self._run({"argv": ["python3"], "python": source}, timeout_s, stdin)

    def _run(self, request: dict[str, Any], timeout_s: float | None, stdin: str | bytes | None) -> RunResult:
        timeout = self.limits.wall_s if timeout_s is None else timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout_s must be a positive number of seconds; got {timeout_s!r}")
        request.update(op="run", timeout_s=float(timeout), stdin=_b64(stdin) if stdin is not None else None)
        answer = self._call(request, timeout + GRACE_S)
        return RunResult(exit_code=answer["exit_code"], stdout=_text(answer["stdout"]),
                         stderr=_text(answer["stderr"]), timed_out=answer["timed_out"],
                         truncated=answer["truncated"], duration_s=answer["duration_s"])

    def write_file(self, path: str, data: str | bytes) -> None:
        """Write `data` to `path` in the work folder (parent folders are made)."""
        if not isinstance(data, (str, bytes)):
            raise ValueError(f"file data must be str or bytes; got {type(data).__name__}")
        self._call({"op": "write", "path": self._path(path), "data": _b64(data)}, GRACE_S + 30)

    def read_file(self, path: str) -> bytes:
        """The bytes of the file at `path` in the work folder."""
        return base64.b64decode(self._call({"op": "read", "path": self._path(path)}, GRACE_S + 30)["data"])

    def copy_in(self, folder: Path, dest: str) -> None:
        """Copy the host folder `folder` (its contents) to the absolute path `dest` inside, made if missing."""
        if not dest.startswith("/"):
            raise ValueError(f"copy_in takes an absolute destination; got {dest!r}")
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            tar.add(folder, arcname=".")
        self._call({"op": "unpack", "dest": dest, "data": _b64(archive.getvalue())}, GRACE_S + 60)

    def _path(self, path: str) -> str:
        if self.confined:
            return relative_path(path, self.workdir)
        if not isinstance(path, str) or not path or "\0" in path:
            raise SandboxPathError(f"a file path must be a non-empty string; got {path!r}")
        return path

    def _call(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox is closed")
            if self._broken is not None:
                raise SandboxLostError(self._broken)
            assert self._process is not None and self._process.stdin is not None
            try:
                self._process.stdin.write(json.dumps(request).encode() + b"\n")
                self._process.stdin.flush()
            except BrokenPipeError:
                answer = None
            else:
                answer = self._read_answer(time.monotonic() + timeout_s)
            if answer is None:
                self._broken = self._broken or (f"the {self.backend} sandbox stopped answering and was ended; "
                                                "its files are gone: close this session and open another")
                self._kill()
                raise SandboxLostError(self._broken)
        if "error" in answer:
            raise (SandboxPathError if answer["error"] == "path" else SandboxError)(answer["message"])
        return answer

    def _read_answer(self, deadline: float) -> dict[str, Any] | None:
        """The supervisor's next line, or None if it ended or said nothing before `deadline`."""
        assert self._process is not None and self._process.stdout is not None
        fd = self._process.stdout.fileno()
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            self._pending += chunk
        line, _, rest = bytes(self._pending).partition(b"\n")
        self._pending = bytearray(rest)
        return json.loads(line)


def clip(text: str, chars: int) -> str:
    """`text` as a model reads a command's output: up to `chars` characters, else its start and its end with how
    much was left out between; trailing newlines dropped."""
    if len(text) <= chars:
        return text.rstrip("\n")
    half = chars // 2
    return f"{text[:half]}\n... {len(text) - chars} characters left out ...\n{text[-half:]}".rstrip("\n")


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _text(data: str) -> str:
    """Decoded output; bytes that are not UTF-8 (a character cut at the output limit too) show as U+FFFD."""
    return base64.b64decode(data).decode("utf-8", errors="replace")
