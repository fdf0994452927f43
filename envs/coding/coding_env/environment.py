"""The coding environment: write a Python function in a sandbox; hidden tests decide the reward."""

from __future__ import annotations

from envkit import Environment, Metric, tool
from envkit.sandbox import Sandbox, SandboxEpisode, SandboxLimits, SandboxPathError, open_sandbox

from .grading import SOLUTION, Verdict, grade, run_examples
from .models import CodingAction, CodingObservation, CodingState, Kind
from .catalog import problem
from .problems import Problem, humaneval_ids
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
#: Characters of code run_python takes (it travels as one command-line argument); longer code goes in a file.
MAX_CODE_CHARS = 100_000
AGENT_INSTRUCTIONS = (f"Write the Python function below in {SOLUTION} in your work folder (it holds the signature "
                      "and docstring now), and try it with python3 there. Stop when it is done: hidden tests decide "
                      "the reward.")
INSTRUCTIONS = (f"Write the Python function below in {SOLUTION} in your work folder (it holds the signature and "
                "docstring now). Use run_examples to try the examples of the docstring, run_command and run_python "
                "to experiment, and submit when it is done: hidden tests decide the reward.")


class CodingEnvironment(SandboxEpisode, Environment[CodingAction, CodingObservation, CodingState]):
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
    ACTION = CodingAction
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
        self._task: Problem | None = None
        self._verdict: Verdict | None = None
        self._runs = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              task_id: str | None = None) -> CodingObservation:
        """Start an episode on `task_id`, or on a train task drawn with `seed`, in a fresh work folder.

        Args:
            seed: Draws a train task when no task_id is given; the same seed, the same task.
            episode_id: A name for the episode; a random one when absent.
            task_id: The task, e.g. "HumanEval/0" or "train/rotate_left_2" (see the splits).
        """
        if task_id is None:
            task_id = self._drawn(seed, train_ids())
        try:
            chosen = problem(task_id) if isinstance(task_id, str) else None
        except KeyError:
            chosen = None
        if chosen is None:
            raise ValueError(f"task_id={task_id!r} names no task: give one of the splits' task ids, e.g. "
                             "'HumanEval/0' (test) or 'train/rotate_left_2' (train)")
        self._begin(chosen, episode_id)
        self._runs = 0
        return CodingObservation(task_id=chosen.task_id, prompt=chosen.prompt, output=INSTRUCTIONS,
                                 calls_left=self.EPISODE_LENGTH, reward=None)

    @property
    def state(self) -> CodingState:
        verdict = self._verdict
        return CodingState(episode_id=self._episode_id, step_count=self._calls,
                           task_id=self._task.task_id if self._task else None, calls=self._calls,
                           runs=self._runs, timeouts=self._timeouts, submitted=verdict is not None,
                           done=verdict is not None, tests_passed=verdict.passed if verdict else None,
                           tests_total=verdict.total if verdict else None)

    def episode_metrics(self) -> dict[str, float]:
        """Solved (1 or 0), the share of hidden tests passed (0 before grading), runs and timeouts."""
        verdict = self._verdict
        return {"solved": int(verdict is not None and verdict.passed == verdict.total),
                "tests_passed": verdict.reward if verdict else 0.0, "runs": self._runs, "timeouts": self._timeouts}

    # -- loop-owning agents (`agent_sandbox` and `finish_episode` are `SandboxEpisode`'s)

    def agent_instruction(self) -> str:
        """The task as a loop-owning agent reads it: what to do, then the function's signature and docstring."""
        return f"{AGENT_INSTRUCTIONS}\n\n{self._require_task().prompt}"

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

    def _open(self, channel_dir: str | bool | None) -> Sandbox:
        """The episode's sandbox (`AGENT_LIMITS` for an agent's, with a channel folder), solution.py in it."""
        sandbox = open_sandbox(limits=LIMITS if channel_dir is None else AGENT_LIMITS, channel_dir=channel_dir)
        sandbox.write_file(SOLUTION, self._require_task().prompt)
        return sandbox

    def _move(self, action: CodingAction) -> CodingObservation:
        """One move; the episode's last one grades solution.py as it stands."""
        output = self._moved(action.kind, action)
        if self._calls >= self.EPISODE_LENGTH:
            return self._grade(f"{output}\n\nThat was the last tool call of the episode, so {SOLUTION} was graded.")
        return CodingObservation(task_id=self._require_task().task_id, output=output,
                                 calls_left=self.EPISODE_LENGTH - self._calls, reward=0.0)

    def _moved(self, kind: Kind, action: CodingAction) -> str:
        sandbox = self._session_sandbox()
        if kind == "write_file":
            try:
                sandbox.write_file(action.path, action.content)
            except SandboxPathError as error:
                return f"refused: {error}"
            return f"wrote {len(action.content.encode())} bytes to {action.path}"
        self._runs += 1
        if kind == "run_examples":
            report, timed_out = run_examples(sandbox, self._require_task(), timeout_s=sandbox.limits.wall_s)
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

    def _grade(self, heading: str) -> CodingObservation:
        problem_ = self._require_task()
        verdict = grade(self._session_sandbox(), problem_, timeout_s=GRADE_TIMEOUT_S, test_timeout_s=TEST_TIMEOUT_S)
        self._verdict = verdict
        self._timeouts += verdict.timeouts
        lines = [f"{heading} {verdict.passed} of {verdict.total} hidden tests passed; reward {verdict.reward:.3f}."]
        if verdict.error:
            lines.append(verdict.error)
        lines.extend(verdict.messages)
        return CodingObservation(task_id=problem_.task_id, output="\n".join(lines), tests_passed=verdict.passed,
                                 tests_total=verdict.total, calls_left=0, reward=verdict.reward, done=True)
