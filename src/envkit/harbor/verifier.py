"""Running a task's tests as Harbor does, in the session's container, and reading the reward they wrote.

Stale rewards are removed, `tests/` is copied to `/tests` (only now: the agent never sees it), and
`/tests/test.sh` runs through bash in the task's work folder with `[verifier].env`, its output in
`/logs/verifier/test-stdout.txt`, within `[verifier].timeout_sec`. Its exit code does not count: the reward is
`/logs/verifier/reward.json` (each key a component) if written, else `/logs/verifier/reward.txt`.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field

from ..sandbox import Sandbox, SandboxError, SandboxLostError
from .tasks import HarborTask

__all__ = ["Verdict", "verify", "episode_reward"]

VERIFIER_DIR = "/logs/verifier"
PREPARE = f"rm -f -- {VERIFIER_DIR}/reward.txt {VERIFIER_DIR}/reward.json && mkdir -p {VERIFIER_DIR} /logs/agent"
RUN_TESTS = f"chmod +x /tests/test.sh && (/tests/test.sh) > {VERIFIER_DIR}/test-stdout.txt 2>&1"
#: Characters of the tests' output kept (its end).
SHOWN_CHARS = 1500


@dataclass(frozen=True)
class Verdict:
    """What the tests decided: the reward, its components (reward.json's keys), and why none, if none."""

    reward: float
    components: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0
    timed_out: bool = False
    #: The end of what the tests printed (`test-stdout.txt`), as harbor keeps it in its job folder.
    output: str = ""


def episode_reward(components: dict[str, float]) -> float:
    """One number for a reward.json: its "reward" key, else its only value, else the mean of its values."""
    if "reward" in components:
        return components["reward"]
    return sum(components.values()) / len(components) if components else 0.0


def verify(box: Sandbox, task: HarborTask) -> Verdict:
    """Run `task`'s tests in `box`; a reward that is missing or not a number scores 0 and says why."""
    started = time.monotonic()
    box.run(["bash", "-c", PREPARE])
    box.copy_in(task.tests_dir, "/tests")
    result = box.run(["bash", "-c", RUN_TESTS], timeout_s=task.verifier_timeout_s, env=task.verifier_env or None)
    seconds = time.monotonic() - started
    output = _output(box)
    if result.timed_out:
        return Verdict(0.0, error=f"the tests ran past [verifier].timeout_sec = {task.verifier_timeout_s:g} s",
                       seconds=seconds, timed_out=True, output=output)
    try:
        components = _read_rewards(box)
    except ValueError as error:
        return Verdict(0.0, error=f"{error}; the tests exited with {result.exit_code}", seconds=seconds,
                       output=output)
    return Verdict(episode_reward(components), components, seconds=seconds, output=output)


def _read_rewards(box: Sandbox) -> dict[str, float]:
    for name in ("reward.json", "reward.txt"):
        try:
            text = box.read_file(f"{VERIFIER_DIR}/{name}").decode(errors="replace")
        except SandboxLostError:
            raise
        except SandboxError:
            continue
        if not text.strip():
            raise ValueError(f"the tests wrote an empty {VERIFIER_DIR}/{name}")
        if name == "reward.txt":
            return {"reward": _number(text.strip(), name)}
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{VERIFIER_DIR}/reward.json is not JSON ({error})") from None
        if not isinstance(data, dict) or not data:
            raise ValueError(f"{VERIFIER_DIR}/reward.json must be an object of numbers; got {text.strip()[:100]!r}")
        return {str(key): _number(value, name) for key, value in data.items()}
    raise ValueError(f"the tests wrote no reward ({VERIFIER_DIR}/reward.txt or reward.json)")


def _number(value: object, name: str) -> float:
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise ValueError(f"{VERIFIER_DIR}/{name} holds {value!r}, not a finite number")
    return number


def _output(box: Sandbox) -> str:
    """The last `SHOWN_CHARS` of what the tests printed ("" when they printed nothing)."""
    try:
        text = box.read_file(f"{VERIFIER_DIR}/test-stdout.txt").decode(errors="replace").strip()
    except SandboxLostError:
        raise
    except SandboxError:
        return ""
    return text[-SHOWN_CHARS:]
