"""Grading in the sandbox: send `inside.py` and a request to the sandbox's Python, read back its verdict.

The hidden tests travel on stdin only when a solution is graded, so nothing in the work folder ever
holds them. The verdict is the output line that starts with a nonce drawn for that run.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envkit.sandbox import RunResult, Sandbox

from .problems import Problem

__all__ = ["Verdict", "grade", "run_examples", "SOLUTION"]

#: The file a submission is graded from.
SOLUTION = "solution.py"
INSIDE = Path(__file__).with_name("inside.py").read_text()


@dataclass(frozen=True)
class Verdict:
    """How a solution did on the hidden tests."""

    passed: int
    total: int
    timeouts: int = 0
    messages: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def reward(self) -> float:
        """The share of the hidden tests passed."""
        return self.passed / self.total if self.total else 0.0


def _inside(sandbox: Sandbox, request: dict[str, Any], timeout_s: float) -> tuple[dict[str, Any] | None, RunResult]:
    nonce = secrets.token_hex(16)
    result = sandbox.run_python(INSIDE, stdin=json.dumps({**request, "nonce": nonce}), timeout_s=timeout_s)
    for line in reversed(result.stdout.splitlines()):
        if line.startswith(nonce + " "):
            return json.loads(line[len(nonce) + 1:]), result
    return None, result


def grade(sandbox: Sandbox, problem: Problem, *, timeout_s: float, test_timeout_s: float) -> Verdict:
    """Run `problem`'s hidden tests against `solution.py` in `sandbox`."""
    request = {"mode": "grade", "path": SOLUTION, "entry_point": problem.entry_point, "setup": problem.setup,
               "steps": [[step.source, step.is_test] for step in problem.steps], "test_timeout_s": test_timeout_s}
    answer, result = _inside(sandbox, request, timeout_s)
    total = problem.test_count
    if answer is None:
        why = (f"the tests ran past {timeout_s:g} s and were stopped" if result.timed_out
               else f"the test run ended without a verdict (exit code {result.exit_code}): {_tail(result.stderr)}")
        return Verdict(0, total, timeouts=int(result.timed_out), error=why)
    if "error" in answer:
        return Verdict(0, total, error=f"{SOLUTION} could not be loaded: {answer['error']}")
    return Verdict(answer["passed"], total, answer["timeouts"], answer["messages"])


def run_examples(sandbox: Sandbox, problem: Problem, *, timeout_s: float) -> tuple[str, bool]:
    """The prompt's `>>>` examples run against `solution.py`: (a report, whether it ran past its time)."""
    request = {"mode": "examples", "path": SOLUTION, "entry_point": problem.entry_point,
               "prompt": problem.docstring}
    answer, result = _inside(sandbox, request, timeout_s)
    if answer is None:
        if result.timed_out:
            return f"the examples ran past {timeout_s:g} s and were stopped", True
        return f"the examples ended without a result (exit code {result.exit_code}): {_tail(result.stderr)}", False
    if "error" in answer:
        return f"{SOLUTION} could not be loaded: {answer['error']}", False
    if not answer["total"]:
        return "this task's prompt has no >>> examples to run", False
    report = f"{answer['passed']} of {answer['total']} examples pass"
    return (report + "\n" + answer["report"]).rstrip(), False


def _tail(text: str, lines: int = 5) -> str:
    return "\n".join(text.strip().splitlines()[-lines:]) or "no error output"
