"""A folder of Harbor tasks as an envkit environment: each session in its task's container, scored by its tests.

`harbor_environment(folder)` makes the environment class of a folder (one class per folder). An episode starts with
`reset(task_id=NAME)` (or a seed, which draws a task), whose observation is the task's instruction; the agent's
tools run shell commands and read and write files in the container, within the task's agent time; `submit()` runs
the task's tests and ends the episode with their reward.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from ..environment import Action, Environment, Observation, State
from ..episode_metrics import Metric
from ..tools import tool
from ..core.task_refs import split_name, task_refs
from ..sandbox import Sandbox, SandboxEpisode, SandboxPathError, clip
from .container import open_task_container
from .rollout import RolloutRequest, capabilities, rollout
from .tasks import HarborTask, find_tasks
from .verifier import Verdict, verify

__all__ = ["HarborEnvironment", "HarborAction", "HarborObservation", "HarborState", "harbor_environment",
           "TOOL_PLAYERS"]

#: Tool calls in an episode; the last one runs the tests, if it is not a submit.
MAX_CALLS = 64
#: Leading lines of instruction.md that Harbor drops (canary strings).
CANARY = re.compile(r"^\s*(<!--.*canary.*-->|#.*canary.*)\s*$", re.IGNORECASE)

Kind = Literal["run_command", "read_file", "write_file", "submit"]


class HarborAction(Action):
    """One move: a shell command, a file read or write, or submit."""

    kind: Kind = Field(description="run_command, read_file, write_file or submit")
    command: str = Field(default="", description="run_command: the command line, run by bash")
    timeout_s: float | None = Field(default=None, gt=0, description="run_command: seconds it may take")
    path: str = Field(default="", description="read_file / write_file: absolute, or relative to the work folder")
    content: str = Field(default="", description="write_file: the whole text")


class HarborObservation(Observation):
    """The instruction after reset, what a move printed, or the tests' verdict."""

    task_id: str = Field(default="", description="The task's name")
    instruction: str = Field(default="", description="What the agent is asked (after reset only)")
    output: str = Field(default="", description="What the move printed or said")
    exit_code: int | None = Field(default=None, description="run_command: the command's exit code")
    reward_components: dict[str, float] = Field(default_factory=dict, description="The tests' reward.json keys")

    def as_text(self) -> str:
        return self.instruction or self.output


class HarborState(State):
    """The episode so far."""

    task_id: str | None = None
    commands: int = 0
    agent_seconds: float = 0.0
    submitted: bool = False
    reward: float | None = None


class HarborEnvironment(SandboxEpisode, Environment[HarborAction, HarborObservation, HarborState]):
    """Harbor tasks, each session in a container of its task's image. Subclassed per folder (`harbor_environment`).

    A loop-owning agent plays an episode in the container itself (`SandboxEpisode`'s agent contract): right after
    reset, `agent_sandbox()` replaces the container reset started with one that has a channel folder at
    /run/envkit; `agent_instruction()` is the task's instruction and `finish_episode()` runs the tests."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    ACTION = HarborAction
    SHOWN_CHARS = 8000
    METRICS = (
        Metric("solved", "solved", "count", success=True, description="the tests gave the full reward (1)"),
        Metric("commands", "commands", "mean", description="shell commands run in the episode"),
        Metric("timeouts", "timeouts", "sum", description="commands and test runs stopped at their time limit"),
        Metric("verifier_s", "verifier s", "mean", description="seconds the tests took"),
    )
    #: The folder the tasks came from, and the tasks by name (set on each folder's subclass).
    ROOT: ClassVar[Path]
    BY_NAME: ClassVar[dict[str, HarborTask]] = {}

    def __init__(self) -> None:
        self._task: HarborTask | None = None
        self._verdict: Verdict | None = None
        self._commands = 0
        self._agent_s = 0.0

    @classmethod
    def task_instruction(cls, task: dict[str, Any]) -> str:
        """The task's instruction.md (as its first observation has it), for task catalogues."""
        found = cls.BY_NAME.get(str(task.get("task_id")))
        return instruction_text(found) if found else ""

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              task_id: str | None = None) -> HarborObservation:
        """Start an episode of `task_id` in a fresh container of its image, or of a task drawn with `seed`.

        Args:
            seed: Draws a task (from `train` when there is one) when no task_id is given.
            episode_id: A name for the episode; a random one when absent.
            task_id: The task's name (its folder's name, or task.toml's [task].name).
        """
        if task_id is None:
            pool = self.tasks("train") if "train" in self.splits() else [t for s in self.splits() for t in self.tasks(s)]
            task_id = self._drawn(seed, [task["task_id"] for task in pool])
        task = self.BY_NAME.get(task_id) if isinstance(task_id, str) else None
        if task is None:
            known = ", ".join(sorted(self.BY_NAME)[:8])
            raise ValueError(f"task_id={task_id!r} names no task of {self.ROOT}; its tasks include {known}")
        self._begin(task, episode_id)
        self._commands, self._agent_s = 0, 0.0
        self._session_sandbox()
        return HarborObservation(task_id=task.name, instruction=instruction_text(task), reward=None)

    @property
    def state(self) -> HarborState:
        verdict = self._verdict
        return HarborState(episode_id=self._episode_id, step_count=self._calls,
                           task_id=self._task.name if self._task else None, commands=self._commands,
                           agent_seconds=round(self._agent_s, 3), submitted=verdict is not None,
                           reward=verdict.reward if verdict else None)

    def episode_metrics(self) -> dict[str, float]:
        """Solved (reward 1), commands, timeouts, the tests' seconds, and each reward.json key."""
        verdict = self._verdict
        metrics = {"solved": int(verdict is not None and verdict.reward >= 1.0), "commands": self._commands,
                   "timeouts": self._timeouts, "verifier_s": verdict.seconds if verdict else 0.0}
        if verdict is not None:
            metrics.update({name: value for name, value in verdict.components.items() if name not in metrics})
        return metrics

    # -- what a loop-owning agent uses

    def agent_instruction(self) -> str:
        """The task's instruction, as an agent program is given it."""
        return instruction_text(self._require_task())

    def reward_components(self) -> tuple[dict[str, float], str | None]:
        """The finished episode's reward.json keys (reward.txt's number as `reward`), and why the tests gave no
        reward, if they gave none."""
        if self._verdict is None:
            raise ValueError("the episode's tests have not run: call finish_episode() first")
        return dict(self._verdict.components), self._verdict.error

    # -- service tools: OpenEnv's Harbor client (`HarborEnv.run_rollout`, `capabilities`, `list_tasks`)

    @tool(service=True)
    def run_rollout(self, split: str = "", task_index: int = 0, harness: str = "reference", sandbox: str = "docker",
                    reward_key: str = "", keep_sandbox: bool = False, force_build: bool = False, llm_url: str = "",
                    model: str = "", api_key: str = "", auth_header: str = "", agent_timeout_sec: float = 0.0,
                    agent_step_limit: int = 0, sampling: dict[str, Any] | None = None, provider: str = "openai",
                    purpose: str = "auto", eval_sampling: dict[str, Any] | None = None) -> str:
        """Run one rollout of a task: the agent in the task's container, its model calls captured token by token,
        then the task's tests. Returns OpenEnv's `HarborRolloutResult` as JSON; a rollout that cannot run or fails
        has ok=false and says why in `error`.

        Args:
            split: The split ("" is the first).
            task_index: The task's index in the split (the Task API's order).
            harness: The agent: "reference" (envkit's bundled agent).
            sandbox: Where the agent runs: "docker" (the task's container).
            reward_key: The reward.json key that is the headline reward; a comma list is an order of preference.
            keep_sandbox: Leave the task's container up after the rollout (until the session's next one or its end).
            force_build: Build the task's image anew (its tag is its content's hash: a changed task always is).
            llm_url: The OpenAI-compatible engine (".../v1") that returns token ids and log-probabilities; "" is
                the server's (ENVKIT_HARBOR_LLM_URL).
            model: The model the engine serves, a folder this server reads its tokenizer from; "" when it serves one.
            api_key: The engine's credential (the agent never sees it).
            auth_header: The header the credential goes in, when not Authorization.
            agent_timeout_sec: Seconds the agent may run; 0 is the task's [agent].timeout_sec.
            agent_step_limit: Model calls the agent may make; 0 is 16.
            sampling: The training policy, {"temperature": t} (other keys only at values that leave it whole).
            provider: The engine's API: "openai".
            purpose: "auto", "train" or "eval".
            eval_sampling: purpose="eval" only: temperature, top_p, top_k.
        """
        return rollout(self, RolloutRequest(
            split=split, task_index=task_index, harness=harness, sandbox=sandbox, reward_key=reward_key,
            keep_sandbox=keep_sandbox, force_build=force_build, llm_url=llm_url, model=model, api_key=api_key,
            auth_header=auth_header, agent_timeout_sec=agent_timeout_sec, agent_step_limit=agent_step_limit,
            sampling=sampling, provider=provider, purpose=purpose, eval_sampling=eval_sampling))

    @tool(service=True)
    def capabilities(self) -> str:
        """The harnesses, sandboxes, datasets and engine of this server, as OpenEnv's `capabilities()` lists them."""
        return capabilities(type(self))

    @tool(service=True)
    def list_tasks(self, split: str = "", start: int = 0, stop: int = 20) -> str:
        """A window of a split's tasks, as OpenEnv's `HarborTaskRef`s (JSON).

        Args:
            split: The split ("" is the first).
            start: The first index.
            stop: The index after the last.
        """
        env_class = type(self)
        name = split_name(env_class, split)
        if name not in env_class.splits():
            raise ValueError(f"unknown split {split!r}; this server's splits are "
                             f"{', '.join(map(repr, env_class.splits()))}")
        return json.dumps(task_refs(env_class, name, start, stop))

    # -- tools

    @tool
    def run_command(self, command: str, timeout_s: float | None = None) -> HarborObservation:
        """Run a shell command (bash) in the task's work folder and show its output and exit code.

        Args:
            command: The command line.
            timeout_s: Seconds it may take (at most the agent's time left).
        """
        return self.step(HarborAction(kind="run_command", command=command, timeout_s=timeout_s))

    @tool
    def read_file(self, path: str) -> HarborObservation:
        """Show a text file of the task's environment.

        Args:
            path: An absolute path, or one relative to the work folder.
        """
        return self.step(HarborAction(kind="read_file", path=path))

    @tool
    def write_file(self, path: str, content: str) -> HarborObservation:
        """Write a text file (made or replaced, with its folders) in the task's environment.

        Args:
            path: An absolute path, or one relative to the work folder.
            content: The whole text of the file.
        """
        return self.step(HarborAction(kind="write_file", path=path, content=content))

    @tool
    def submit(self) -> HarborObservation:
        """Done: the task's tests run, their reward ends the episode."""
        return self.step(HarborAction(kind="submit"))

    # -- moves

    def _open(self, channel_dir: str | bool | None) -> Sandbox:
        # A channel folder of its own from the start: an agent then takes the container reset opened, not another.
        return open_task_container(self._require_task(), True if channel_dir is None else channel_dir)

    def _move(self, action: HarborAction) -> HarborObservation:
        """One move within the agent's time; the episode's last call, or the time used up, runs the tests."""
        task = self._require_task()
        left = task.agent_timeout_s - self._agent_s
        if left <= 0:
            return self._grade(f"The agent's time ({task.agent_timeout_s:g} s, [agent].timeout_sec) is used up.")
        output, exit_code = self._moved(action, left)
        if self._calls >= MAX_CALLS:
            return self._grade(f"{output}\n\nThat was the episode's last tool call ({MAX_CALLS}); the tests ran.")
        return HarborObservation(task_id=task.name, output=output, exit_code=exit_code, reward=0.0)

    def _moved(self, action: HarborAction, left: float) -> tuple[str, int | None]:
        box = self._session_sandbox()
        if action.kind == "run_command":
            if not action.command.strip():
                return "refused: the command is empty; give a shell command line, e.g. \"ls\"", None
            timeout = min(action.timeout_s or left, left)
            result = box.run(["bash", "-c", action.command], timeout_s=timeout)
            self._commands += 1
            self._agent_s += result.duration_s
            return self._shown(result, timeout), result.exit_code
        try:
            if action.kind == "write_file":
                box.write_file(action.path, action.content)
                return f"wrote {len(action.content.encode())} bytes to {action.path}", None
            return clip(box.read_file(action.path).decode(errors="replace"), self.SHOWN_CHARS), None
        except SandboxPathError as error:
            return f"refused: {error}", None

    def _grade(self, heading: str) -> HarborObservation:
        task = self._require_task()
        verdict = verify(self._session_sandbox(), task)
        self._verdict = verdict
        self._timeouts += verdict.timed_out
        parts = [f"{heading} The tests ran: reward {verdict.reward:g}."]
        if len(verdict.components) > 1 or set(verdict.components) - {"reward"}:
            parts.append(", ".join(f"{name} {value:g}" for name, value in verdict.components.items()))
        if verdict.error:
            parts.append(verdict.error)
        if verdict.output:
            parts.append(f"The tests' output ends:\n{verdict.output}")
        return HarborObservation(task_id=task.name, output="\n".join(parts), reward=verdict.reward, done=True,
                                 reward_components=dict(verdict.components))


def instruction_text(task: HarborTask) -> str:
    """instruction.md without the canary lines (and the blank lines after them) that Harbor drops."""
    lines = task.instruction.splitlines()
    while lines and CANARY.match(lines[0]):
        lines.pop(0)
        while lines and not lines[0].strip():
            lines.pop(0)
    return "\n".join(lines).strip() + "\n"


_classes: dict[Path, type[HarborEnvironment]] = {}


def harbor_environment(folder: Path | str) -> type[HarborEnvironment]:
    """The environment class of a Harbor task folder, or a folder of them (one class per folder, made once)."""
    root = Path(folder).resolve()
    if root not in _classes:
        splits = find_tasks(root)
        by_name = {task.name: task for tasks in splits.values() for task in tasks}
        _REGISTRY.update(by_name)
        name = "HarborTasks_" + (re.sub(r"\W+", "_", root.name).strip("_") or "root")
        _classes[root] = type(name, (HarborEnvironment,), {
            "__module__": __name__, "__doc__": f"The Harbor tasks of {root.name}.", "ROOT": root, "BY_NAME": by_name,
            "TASKS": {split: tuple({"task_id": task.name} for task in tasks) for split, tasks in splits.items()}})
    return _classes[root]


# -- scripted players for `envkit eval --policy oracle|nothing`

#: Where harbor's oracle writes solve.sh's output, and how much of its end the oracle's move shows.
ORACLE_LOG, ORACLE_SHOWN = "/logs/agent/oracle.txt", 2000
#: Every task of the folders loaded in this process, by name: the oracle reads its solution from here.
_REGISTRY: dict[str, HarborTask] = {}


def oracle(seed: int) -> Any:
    """Harbor's oracle: copies `solution/` to /solution, runs solve.sh as Harbor does, then submits."""
    moves: list[tuple[str, dict[str, Any]]] = []

    def act(observation: dict[str, Any], task: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        if not moves and "instruction" in observation and observation.get("instruction"):
            moves.extend(_oracle_moves(_REGISTRY[str(observation.get("task_id") or task["task_id"])]))
        return moves.pop(0) if moves else None

    return act


def _oracle_moves(task: HarborTask) -> list[tuple[str, dict[str, Any]]]:
    """Copy `solution/` byte for byte and mode for mode (as harbor's upload does), run solve.sh, submit.

    Text files go by `write_file`; a file that is not UTF-8 goes as base64 text, decoded in the container; the
    modes other than 0644 are set before solve.sh runs."""
    moves: list[tuple[str, dict[str, Any]]] = []
    chmods = []
    for file in sorted(task.solution_dir.rglob("*")):
        if not file.is_file():
            continue
        target = f"/solution/{file.relative_to(task.solution_dir).as_posix()}"
        data = file.read_bytes()
        try:
            moves.append(("write_file", {"path": target, "content": data.decode()}))
        except UnicodeDecodeError:
            encoded = shlex.quote(f"{target}.base64")
            moves.append(("write_file", {"path": f"{target}.base64", "content": base64.b64encode(data).decode()}))
            moves.append(("run_command", {"command": f"base64 -d {encoded} > {shlex.quote(target)} && rm {encoded}"}))
        if (mode := file.stat().st_mode & 0o7777) != 0o644:
            chmods.append(f"chmod {mode:o} {shlex.quote(target)} && ")
    env = " ".join(f"{name}={shlex.quote(value)}" for name, value in
                   {"DEBIAN_FRONTEND": "noninteractive", **task.solution_env}.items())
    moves.append(("run_command", {"command": f"{''.join(chmods)}chmod +x /solution/solve.sh && "
                                             f"(env {env} /solution/solve.sh) > {ORACLE_LOG} 2>&1; status=$?; "
                                             f"tail -c {ORACLE_SHOWN} {ORACLE_LOG}; exit $status"}))
    moves.append(("submit", {}))
    return moves


def nothing(seed: int) -> Any:
    """Submits at once: what an agent that does nothing scores."""
    return lambda observation, task: ("submit", {}) if not observation.get("done") else None


#: `envkit eval --policy NAME` for Harbor task folders.
TOOL_PLAYERS = {"oracle": oracle, "nothing": nothing}
