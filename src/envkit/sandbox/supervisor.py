"""The program that runs inside every sandbox, as its process 1: it runs commands and moves files for the host.

Started as `python3 -I -S -c SOURCE LIMITS_JSON [OPTIONS_JSON]` by both backends (bubblewrap with `--as-pid-1`, a container's
command), it reads one JSON request a line on stdin and answers one JSON line on stdout. Being process 1 of the
sandbox's pid namespace, it ends every other process there after each command (`kill(-1, SIGKILL)`), and when its
stdin closes (the session closed, or the server died) it exits, which ends the whole namespace. Only the server holds
the other end of stdin, so its death closes it even while a command runs: the command's processes end at once, not
at its wall time.

Standard library only: it runs on whatever Python the sandbox has.
"""

import base64
import io
import json
import os
import resource
import selectors
import signal
import stat
import subprocess
import sys
import tarfile
import time

#: The work folder commands run in; file requests stay inside it unless the sandbox is not confined (options).
WORKDIR = "/work"
CONFINED = True
#: Whether commands start under the sandbox's rlimits (options); a whole-image container keeps the engine's, as
#: harbor's task containers do, its memory and processes bounded by its cgroups.
RLIMITS = True
#: Whether this supervisor is process 1 of the sandbox's pid namespace; else it confines itself (confine.py, sent ahead).
PROCESS_ONE = True
#: Whether other processes (the server, other sandboxes) run as this supervisor's uid, and count against its limit.
SHARED_UID = False
#: The folders commands may write, measured every `DISK_EVERY_S` against the disk limit when not on a tmpfs.
WRITABLE = ()
DISK_EVERY_S = 0.05
CHUNK = 65536


class PathRefused(Exception):
    """A file request for a path outside the work folder, or not a regular file."""


def reply(answer):
    sys.stdout.buffer.write(json.dumps(answer).encode() + b"\n")
    sys.stdout.buffer.flush()


def end_others(group=None):
    """SIGKILL every process of the sandbox but this one and reap them; as process 1, orphans come back to us.
    Without a pid namespace of its own (the landlock backend) it ends the command's process `group` instead, which
    the command's processes may not leave, and reaps them as their subreaper."""
    statuses = {}
    while True:
        try:
            if PROCESS_ONE:
                os.kill(-1, signal.SIGKILL)
            elif group is not None:
                os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return statuses
        statuses[pid] = status


def command_limits(limits):
    """The rlimits every command starts under (CPU and memory are per process; processes are per uid)."""
    cpu = max(1, int(limits["cpu_s"] + 0.999))
    memory = limits["memory_mb"] << 20
    disk = limits["disk_mb"] << 20

    rlimits = [(resource.RLIMIT_CPU, cpu, cpu + 1), (resource.RLIMIT_AS, memory, memory),
               (resource.RLIMIT_FSIZE, disk, disk), (resource.RLIMIT_NOFILE, 256, 256), (resource.RLIMIT_CORE, 0, 0)]
    if os.getuid() != 0:   # root's count would be the host's; a container's pids limit bounds root's processes
        count = limits["processes"] + (tasks_of(os.getuid()) if SHARED_UID else 0)
        rlimits.append((resource.RLIMIT_NPROC, count, count))

    def apply():
        for name, value, hard in rlimits:
            resource.setrlimit(name, (value, hard))
        if not PROCESS_ONE:
            confine_command()
    return apply


def tasks_of(uid):
    """How many tasks (threads) `uid` runs now: its process limit counts those of other sandboxes sharing it."""
    count = 0
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and os.stat(f"/proc/{name}").st_uid == uid:
                count += os.stat(f"/proc/{name}/task").st_nlink - 2
        except OSError:
            pass
    return count


def run(request, limits):
    argv = request["argv"]
    pass_fds = ()
    if request.get("python") is not None:   # the source travels in a memory file: no size limit, nothing on disk
        script = os.memfd_create("main.py", 0)
        os.write(script, request["python"].encode())
        argv, pass_fds = ["python3", f"/proc/self/fd/{script}"], (script,)
    started = time.monotonic()
    try:
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   cwd=WORKDIR, start_new_session=True, pass_fds=pass_fds,
                                   env={**os.environ, **request["env"]} if request.get("env") else None,
                                   preexec_fn=command_limits(limits) if RLIMITS else None)
    except OSError as error:
        return {"exit_code": 127, "stdout": "", "stderr": base64.b64encode(
            f"{argv[0]}: {error.strerror}\n".encode()).decode(), "timed_out": False, "truncated": False,
            "duration_s": time.monotonic() - started}
    finally:
        for fd in pass_fds:
            os.close(fd)
    output, truncated, timed_out, status = collect(process, request, limits, started)
    return {"exit_code": None if timed_out else os.waitstatus_to_exitcode(status),
            "stdout": base64.b64encode(output["stdout"]).decode(), "stderr": base64.b64encode(output["stderr"]).decode(),
            "timed_out": timed_out, "truncated": truncated, "duration_s": time.monotonic() - started}


def collect(process, request, limits, started):
    """Feed stdin, read both outputs up to the cap, and end everything when the command ends or its time is up."""
    cap = limits["output_bytes"]
    deadline = started + request["timeout_s"]
    output = {"stdout": bytearray(), "stderr": bytearray()}
    truncated = timed_out = False
    status = None
    pending = base64.b64decode(request["stdin"]) if request.get("stdin") else b""
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ, "stdout")
    selector.register(process.stderr, selectors.EVENT_READ, "stderr")
    exited = os.pidfd_open(process.pid)
    selector.register(exited, selectors.EVENT_READ, "exit")
    # The host writes nothing while a command runs: stdin readable now is its end, closed by the server's death.
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "host")
    if pending:
        os.set_blocking(process.stdin.fileno(), False)
        selector.register(process.stdin, selectors.EVENT_WRITE, "stdin")
    else:
        process.stdin.close()
    measured = started
    while status is None or any(key.data != "host" for key in selector.get_map().values()):
        wait = None if status is not None else max(0.0, deadline - time.monotonic())
        if status is None and not PROCESS_ONE:
            wait = min(wait, DISK_EVERY_S)
        events = selector.select(wait)
        if status is None and not PROCESS_ONE and time.monotonic() - measured >= DISK_EVERY_S:
            measured = time.monotonic()
            if disk_used() > limits["disk_mb"] << 20:   # no tmpfs of its own: the folders are measured instead
                status = end_others(process.pid).get(process.pid, 0)
                selector.unregister(exited)
                output["stderr"] += f"\nNo space left: the sandbox's files passed {limits['disk_mb']} MB; " \
                    "the command was ended\n".encode()
        if not events and status is None and time.monotonic() >= deadline:   # out of time: all of it ends now
            timed_out = True
            status = end_others(process.pid).get(process.pid, 0)
            selector.unregister(exited)
        for key, _ in events:
            if key.data == "host":
                end_others(process.pid)
                os._exit(0)
            if key.data == "exit":
                status = os.waitpid(process.pid, 0)[1]
                end_others(process.pid)        # background processes die with their command
                selector.unregister(exited)
            elif key.data == "stdin":
                try:
                    pending = pending[os.write(key.fd, pending[:CHUNK]):]
                except BrokenPipeError:
                    pending = b""
                if not pending:
                    selector.unregister(key.fileobj)
                    key.fileobj.close()
            else:
                chunk = os.read(key.fd, CHUNK)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                kept = output[key.data]
                room = cap - len(kept)
                if len(chunk) > room:
                    truncated = True
                kept += chunk[:max(0, room)]
    selector.unregister(sys.stdin.fileno())
    os.close(exited)
    for stream in (process.stdin, process.stdout, process.stderr):
        if not stream.closed:
            stream.close()
    return output, truncated, timed_out, status


def disk_used():
    """Bytes the sandbox's writable folders (its work folder and temporary folder) take on disk."""
    used = 0
    folders = list(WRITABLE)
    while folders:
        try:
            with os.scandir(folders.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
                    used += entry.stat(follow_symlinks=False).st_blocks * 512
        except OSError:
            pass
    return used


def resolve(path, must_exist):
    """The real path of `path` in the work folder; refuses anything that is, or leads, outside it (in a confined
    sandbox)."""
    full = os.path.realpath(os.path.join(WORKDIR, path))
    if CONFINED and full != WORKDIR and not full.startswith(WORKDIR + "/"):
        raise PathRefused(f"{path!r} leads outside the work folder {WORKDIR}")
    if must_exist and not os.path.lexists(full):
        raise PathRefused(f"no file {path}" if os.path.isabs(path) else f"no file {path!r} in the work folder {WORKDIR}")
    return full


def open_checked(full, path, flags):
    """Open a resolved path without following a symlink put there since, and only if it is a regular file."""
    try:
        fd = os.open(full, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except IsADirectoryError:
        raise PathRefused(f"{path!r} is a folder, not a file") from None
    except OSError as error:
        if error.errno == 40:   # ELOOP: the last part became a symlink
            raise PathRefused(f"{path!r} is a symlink") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PathRefused(f"{path!r} is not a regular file")
    return fd


def write(request, limits):
    full = resolve(request["path"], must_exist=False)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    resolve(os.path.dirname(full), must_exist=True)
    fd = open_checked(full, request["path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        data = base64.b64decode(request["data"])
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)
    return {}


def read(request, limits):
    fd = open_checked(resolve(request["path"], must_exist=True), request["path"], os.O_RDONLY)
    try:
        data = bytearray()
        while chunk := os.read(fd, CHUNK):
            data += chunk
    finally:
        os.close(fd)
    return {"data": base64.b64encode(data).decode()}


def unpack(request, limits):
    """Extract a tar archive into an absolute folder (made if missing); the host's own files, e.g. a task's tests."""
    os.makedirs(request["dest"], exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(request["data"]))) as archive:
        archive.extractall(request["dest"], **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return {}


HANDLERS = {"run": run, "write": write, "read": read, "unpack": unpack}


def main():
    global WORKDIR, CONFINED, RLIMITS, PROCESS_ONE, WRITABLE, SHARED_UID
    limits = json.loads(sys.argv[1])
    options = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    WORKDIR, CONFINED = options.get("workdir", WORKDIR), options.get("confined", CONFINED)
    RLIMITS = options.get("rlimits", RLIMITS)
    os.makedirs(WORKDIR, exist_ok=True)
    os.chdir(WORKDIR)
    enforced = {}
    if options.get("confine"):
        PROCESS_ONE, WRITABLE, SHARED_UID = False, tuple(options["confine"]["write"]), options["confine"]["shared_uid"]
        try:
            enforced = confine_supervisor(options["confine"])
        except (Unconfinable, OSError) as error:
            reply({"ready": False, "message": str(error)})
            return
    reply({"ready": True, "pid": os.getpid(), **enforced})
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            answer = HANDLERS[request["op"]](request, limits)
        except PathRefused as error:
            answer = {"error": "path", "message": str(error)}
        except OSError as error:
            answer = {"error": "os", "message": f"{request.get('path', request['op'])}: {error.strerror}"}
        except Exception as error:   # the sandbox must outlive a request it could not serve
            answer = {"error": "agent", "message": f"{type(error).__name__}: {error}"}
        reply(answer)
    end_others()


if __name__ == "__main__":
    main()
