"""Runs inside the sandbox: grades a solution file against hidden tests, or runs a prompt's examples.

The environment sends this file's source to the sandbox's Python with a JSON request on stdin, so
neither the tests nor this script is ever written to the work folder. It imports nothing from
envkit. The last line it prints is `<nonce> <json>`; the nonce, drawn by the environment for each
run, tells that line from anything the solution prints.

Request: {"mode": "grade" | "examples", "nonce": str, "path": str, "entry_point": str,
          "setup": str, "steps": [[source, is_test], ...], "prompt": str, "test_timeout_s": float}
"""

import doctest
import io
import json
import signal
import sys
import traceback

MAX_MESSAGES = 3


class TestTimeout(Exception):
    """A test ran past its time."""


def _alarm(signum, frame):
    raise TestTimeout()


def load(path, entry_point):
    """The solution's globals, after running the file as a module named `solution`."""
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    namespace = {"__name__": "solution", "__file__": path}
    exec(compile(source, path, "exec"), namespace)
    if entry_point and not callable(namespace.get(entry_point)):
        raise NameError(f"{path} defines no function {entry_point}()")
    return namespace


def grade(request, namespace):
    """Each step in order; a test passes when it raises nothing within its time."""
    passed = total = timeouts = 0
    messages = []
    namespace["candidate"] = namespace[request["entry_point"]]
    exec(request["setup"], namespace)
    signal.signal(signal.SIGALRM, _alarm)
    for source, is_test in request["steps"]:
        total += is_test
        signal.setitimer(signal.ITIMER_REAL, request["test_timeout_s"])
        try:
            exec(source, namespace)
            passed += is_test
        except TestTimeout:
            timeouts += 1
            messages.append(f"timed out: {source.splitlines()[0]}")
        except BaseException as error:  # noqa: BLE001 - a failing test, whatever it raised
            messages.append(f"{type(error).__name__}: {source.splitlines()[0]}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return {"passed": passed, "total": total, "timeouts": timeouts, "messages": messages[:MAX_MESSAGES]}


def examples(request, namespace):
    """The prompt's `>>>` examples, run as doctests against the solution."""
    found = doctest.DocTestParser().get_examples(request["prompt"])
    test = doctest.DocTest(found, namespace, "examples", None, None, None)
    report = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    result = runner.run(test, out=report.write, clear_globs=False)
    return {"passed": result.attempted - result.failed, "total": result.attempted, "report": report.getvalue()}


def main():
    request = json.loads(sys.stdin.read())
    nonce = request.pop("nonce")
    stdout = sys.stdout
    try:
        namespace = load(request["path"], request["entry_point"])
        answer = grade(request, namespace) if request["mode"] == "grade" else examples(request, namespace)
    except BaseException as error:  # noqa: BLE001 - the solution itself failed to load
        detail = traceback.format_exception_only(type(error), error)[-1].strip()
        answer = {"error": detail}
    stdout.flush()
    sys.__stdout__.write(f"\n{nonce} {json.dumps(answer)}\n")


main()
