"""The coding environment: write a Python function in a sandbox; hidden tests decide the reward."""

from __future__ import annotations

import os
import random
import uuid

from envkit import Environment, Metric, tool
from envkit.sandbox import RunResult, Sandbox, SandboxLimits, SandboxPathError, clip, open_sandbox

from .grading import SOLUTION, Verdict, grade, run_examples
from .models import CodingAction, CodingObservation, CodingState, Kind
from .problems import Problem, humaneval_ids, problem
from .train_problems import train_ids

__all__ = ["CodingEnvironment", "LIMITS", "AGENT_LIMITS"]

#: What one session's sandbox may use; time limits are per command.
LIMITS = SandboxLimits(wall_s=10.0, cpu_s=10.0, memory_mb=512, processes=64, output_bytes=200_000, disk_mb=64)
#: The same for a loop-owning agent's sandbox: the agent's whole run is one command, its own process included.
AGENT_LIMITS = SandboxLimits(wall_s=600.0, cpu_s=300.0, memory_mb=1024, processes=64, output_bytes=200_000,
                             disk_mb=64)
#: Seconds one hidden test may run, and the whole grading run.
TEST_TIMEOUT_S = 5.0
GRADE_TIMEOUT_S = 30.0
#: Characters of a command's output the agent reads (the start and the end of longer output).
SHOWN_CHARS = 4000
#: Characters of code run_python takes (it travels as one command-line argument); longer code goes in a file.
MAX_CODE_CHARS = 100_000
AGENT_INSTRUCTIONS = (f"Write the Python function below in {SOLUTION} in your work folder (it holds the signature "
                      "and docstring now), and try it with python3 there. Stop when it is done: hidden tests decide "
                      "the reward.")
INSTRUCTIONS = (f"Write the Python function below in {SOLUTION} in your work folder (it holds the signature and "
                "docstring now). Use run_examples to try the examples of the docstring, run_command and run_python "
                "to experiment, and submit when it is done: hidden tests decide the reward.")


class CodingEnvironment(Environment[CodingAction, CodingObservation, CodingState]):
    """Write a Python function to pass hidden tests; your code runs in a sandbox of this session's own.

    `reset(task_id="HumanEval/0")` picks a task (the `test` split is HumanEval's 164 problems, the
    `train` split 106 of envkit's own); `reset(seed=...)` draws a train task. The sandbox (local
    bubblewrap or a Docker container, `ENVKIT_SANDBOX`) opens at the first tool call and closes with
    the session or at the next reset.

    A loop-owning agent plays an episode in the sandbox itself: after reset, `agent_sandbox()` opens the session's
    sandbox with a channel folder for the agent's model server, the agent gets `agent_instruction()`, and
    `finish_episode()` grades solution.py and returns the reward.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True
    #: Tool calls in an episode; the last one grades whatever solution.py holds, if it is not a submit.
    EPISODE_LENGTH = 8
    REWARD_RANGE = (0.0, 1.0)
    TASKS = {"train": tuple({"task_id": task_id} for task_id in train_ids()),
             "test": tuple({"task_id": task_id} for task_id in humaneval_ids())}
    METRICS = (
        Metric("solved", "solved", "count", success=True, description="every hidden test passed"),
        Metric("tests_passed", "hidden tests passed", "mean", description="share of the hidden tests passed"),
        Metric("runs", "runs", "mean", description="commands, Python runs and example runs in the episode"),
        Metric("timeouts", "timeouts", "sum", description="runs and hidden tests stopped at their time limit"),
    )

    def __init__(self) -> None:
        self._sandbox: Sandbox | None = None
        self._channel: str | None = None
        self._problem: Problem | None = None
        self._episode_id: str | None = None
        self._calls = self._runs = self._timeouts = 0
        self._verdict: Verdict | None = None

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              task_id: str | None = None) -> CodingObservation:
        """Start an episode on `task_id`, or on a train task drawn with `seed`, in a fresh work folder.

        Args:
            seed: Draws a train task when no task_id is given; the same seed, the same task.
            episode_id: A name for the episode; a random one when absent.
            task_id: The task, e.g. "HumanEval/0" or "train/rotate_left_2" (see the splits).
        """
        if task_id is None:
            if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
                raise ValueError(f"seed={seed!r} is not a whole number; give an int or leave it out")
            task_id = random.Random(seed).choice(train_ids())
        try:
            chosen = problem(task_id) if isinstance(task_id, str) else None
        except KeyError:
            chosen = None
        if chosen is None:
            raise ValueError(f"task_id={task_id!r} names no task: give one of the splits' task ids, e.g. "
                             "'HumanEval/0' (test) or 'train/rotate_left_2' (train)")
        self._close_sandbox()
        self._problem, self._verdict = chosen, None
        self._episode_id = episode_id or uuid.uuid4().hex
        self._calls = self._runs = self._timeouts = 0
        return CodingObservation(task_id=chosen.task_id, prompt=chosen.prompt, output=INSTRUCTIONS,
                                 calls_left=self.EPISODE_LENGTH, reward=None)

    def step(self, action: CodingAction) -> CodingObservation:
        """Make one move; the episode ends at submit or after `EPISODE_LENGTH` moves."""
        if not isinstance(action, CodingAction):
            raise TypeError("step() takes a CodingAction, e.g. CodingAction(kind='submit'); "
                            f"got {type(action).__name__}")
        problem_ = self._require_problem()
        if self._verdict is not None:
            raise ValueError("the episode is over (its solution was graded); call reset() to start another")
        self._calls += 1
        if action.kind == "submit":
            return self._graded("Submitted.")
        output = self._move(action.kind, action)
        if self._calls >= self.EPISODE_LENGTH:
            return self._graded(f"{output}\n\nThat was the last tool call of the episode, so {SOLUTION} was graded.")
        return CodingObservation(task_id=problem_.task_id, output=output, calls_left=self.EPISODE_LENGTH - self._calls,
                                 reward=0.0)

    @property
    def state(self) -> CodingState:
        verdict = self._verdict
        return CodingState(episode_id=self._episode_id, step_count=self._calls,
                           task_id=self._problem.task_id if self._problem else None, calls=self._calls,
                           runs=self._runs, timeouts=self._timeouts, submitted=verdict is not None,
                           done=verdict is not None, tests_passed=verdict.passed if verdict else None,
                           tests_total=verdict.total if verdict else None)

    def episode_metrics(self) -> dict[str, float]:
        """Solved (1 or 0), the share of hidden tests passed (0 before grading), runs and timeouts."""
        verdict = self._verdict
        return {"solved": int(verdict is not None and verdict.passed == verdict.total),
                "tests_passed": verdict.share if verdict else 0.0, "runs": self._runs, "timeouts": self._timeouts}

    def close(self) -> None:
        """End the sandbox and everything running in it."""
        self._close_sandbox()

    # -- loop-owning agents

    def agent_sandbox(self, channel_dir: str | None = None) -> Sandbox:
        """The episode's sandbox for a loop-owning agent, opened now (with `AGENT_LIMITS`) if it is not yet: its
        work folder holds solution.py, and its `channel_dir` is the host folder where the agent's model server
        listens (`<channel_dir>/proxy.sock`): `channel_dir` when given (it stays the caller's), else a folder of the
        session's own, removed with the sandbox. The session's tool calls run in the same sandbox."""
        if self._sandbox is not None and self._sandbox.channel_dir is None:
            raise ValueError("this episode's sandbox was opened by a tool call, without a channel for an agent: "
                             "call agent_sandbox() right after reset()")
        if self._sandbox is not None and channel_dir is not None \
                and self._sandbox.channel_dir != os.path.realpath(channel_dir):
            raise ValueError(f"this episode's sandbox already has the channel folder {self._sandbox.channel_dir}; "
                             "call agent_sandbox() again without channel_dir, or reset() first")
        if self._sandbox is None:
            self._start_sandbox(AGENT_LIMITS, channel_dir or True)
        assert self._sandbox is not None
        return self._sandbox

    def agent_instruction(self) -> str:
        """The task as a loop-owning agent reads it: what to do, then the function's signature and docstring."""
        return f"{AGENT_INSTRUCTIONS}\n\n{self._require_problem().prompt}"

    def finish_episode(self) -> float:
        """Grade solution.py with the hidden tests, end the episode and return the reward (the share passed);
        again after that, the same reward."""
        if self._verdict is None:
            self._graded("Finished.")
        assert self._verdict is not None
        return self._verdict.share

    # -- tools

    @tool
    def write_file(self, path: str, content: str) -> CodingObservation:
        """Write a text file in your work folder (made or replaced); solution.py is what gets graded.

        Args:
            path: The file's path, relative to the work folder, e.g. "solution.py".
            content: The whole text of the file.
        """
        return self.step(CodingAction(kind="write_file", path=path, content=content))

    @tool
    def run_command(self, command: str) -> CodingObservation:
        """Run a shell command in your work folder, e.g. "python3 solution.py" or "ls".

        Args:
            command: The command line, run by /bin/sh.
        """
        return self.step(CodingAction(kind="run_command", command=command))

    @tool
    def run_python(self, code: str) -> CodingObservation:
        """Run Python code in your work folder (solution.py can be imported as a module) and show what it printed.

        Args:
            code: The Python source to run.
        """
        return self.step(CodingAction(kind="run_python", code=code))

    @tool
    def run_examples(self) -> CodingObservation:
        """Run the docstring's >>> examples against the function in solution.py and show which pass."""
        return self.step(CodingAction(kind="run_examples"))

    @tool
    def submit(self) -> CodingObservation:
        """Submit solution.py: the hidden tests run, the reward is the share they pass, and the episode ends."""
        return self.step(CodingAction(kind="submit"))

    # -- moves

    def _move(self, kind: Kind, action: CodingAction) -> str:
        sandbox = self._open_sandbox()
        if kind == "write_file":
            try:
                sandbox.write_file(action.path, action.content)
            except SandboxPathError as error:
                return f"refused: {error}"
            return f"wrote {len(action.content.encode())} bytes to {action.path}"
        self._runs += 1
        if kind == "run_examples":
            report, timed_out = run_examples(sandbox, self._require_problem(), timeout_s=LIMITS.wall_s)
            self._timeouts += timed_out
            return report
        if kind == "run_command":
            if not action.command.strip():
                return "refused: the command is empty; give a shell command line, e.g. \"ls\""
            return self._shown(sandbox.run(action.command))
        if len(action.code) > MAX_CODE_CHARS:
            return (f"refused: {len(action.code)} characters of code; run_python takes up to {MAX_CODE_CHARS}. "
                    "Write longer code to a file with write_file and run it with run_command")
        return self._shown(sandbox.run(["python3", "-c", action.code]))

    def _shown(self, result: RunResult) -> str:
        self._timeouts += result.timed_out
        parts = [clip(result.stdout, SHOWN_CHARS), clip(result.stderr, SHOWN_CHARS)]
        text = "\n".join(part for part in parts if part)
        if result.timed_out:
            ending = f"stopped after {LIMITS.wall_s:g} s (the time limit of a command)"
        else:
            ending = f"exit code {result.exit_code}"
        if result.truncated:
            ending += f"; output cut at {LIMITS.output_bytes} bytes"
        return f"{text}\n[{ending}]" if text else f"[no output; {ending}]"

    def _graded(self, heading: str) -> CodingObservation:
        problem_ = self._require_problem()
        verdict = grade(self._open_sandbox(), problem_, timeout_s=GRADE_TIMEOUT_S, test_timeout_s=TEST_TIMEOUT_S)
        self._verdict = verdict
        self._timeouts += verdict.timeouts
        lines = [f"{heading} {verdict.passed} of {verdict.total} hidden tests passed; reward {verdict.share:.3f}."]
        if verdict.error:
            lines.append(verdict.error)
        lines.extend(verdict.messages)
        return CodingObservation(task_id=problem_.task_id, output="\n".join(lines), tests_passed=verdict.passed,
                                 tests_total=verdict.total, calls_left=0, reward=verdict.share, done=True)

    def _open_sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._start_sandbox(LIMITS, None)
        assert self._sandbox is not None
        return self._sandbox

    def _start_sandbox(self, limits: SandboxLimits, channel_dir: str | bool | None) -> None:
        sandbox = open_sandbox(limits=limits, channel_dir=channel_dir)
        sandbox.write_file(SOLUTION, self._require_problem().prompt)
        self._sandbox = sandbox

    def _close_sandbox(self) -> None:
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            sandbox.close()

    def _require_problem(self) -> Problem:
        if self._problem is None:
            raise ValueError("no task yet: call reset() first (e.g. reset(task_id='HumanEval/0'))")
        return self._problem
