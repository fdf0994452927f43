"""The coding environment's action, observation and state."""

from __future__ import annotations

from typing import Literal

from envkit import Action, Observation, State
from pydantic import Field

#: The moves of an episode; the tools of the same names make them.
Kind = Literal["write_file", "run_command", "run_python", "run_examples", "submit"]


class CodingAction(Action):
    """One move: write a file, run a shell command or Python, run the prompt's examples, or submit."""

    kind: Kind = Field(description="write_file, run_command, run_python, run_examples or submit")
    path: str = Field(default="solution.py", description="write_file: the file, relative to the work folder")
    content: str = Field(default="", description="write_file: the text to write")
    command: str = Field(default="", description="run_command: the shell command line")
    code: str = Field(default="", description="run_python: the Python source to run")


class CodingObservation(Observation):
    """What the last move showed: the task after reset, a command's output, or the hidden tests' verdict."""

    task_id: str = Field(default="", description='The task, e.g. "HumanEval/0" or "train/rotate_left_2"')
    prompt: str = Field(default="", description="The function to write (signature and docstring); after reset only")
    output: str = Field(default="", description="What the move printed or said")
    tests_passed: int | None = Field(default=None, description="Hidden tests passed, once submitted")
    tests_total: int | None = Field(default=None, description="Hidden tests of the task, once submitted")
    calls_left: int = Field(default=0, description="Tool calls left before the episode ends on its own")

    def as_text(self) -> str:
        """The prompt (after reset) or the move's output, then how many calls are left while the episode runs."""
        text = self.output
        if self.prompt:
            text = f"{text}\n\n```python\n{self.prompt.rstrip()}\n```"
        if not self.done:
            text += f"\n[{self.calls_left} tool call{'s' if self.calls_left != 1 else ''} left]"
        return text


class CodingState(State):
    """The episode so far; the hidden tests are never part of it."""

    task_id: str | None = None
    calls: int = 0
    runs: int = 0
    timeouts: int = 0
    submitted: bool = False
    done: bool = False
    tests_passed: int | None = None
    tests_total: int | None = None
