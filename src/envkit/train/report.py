"""What a run shows and leaves behind: a line per step (and a progress bar on a terminal), metrics files, a plot,
a summary, and a warning when the run has no learning signal.

Files in the output directory:

    metrics.jsonl      one JSON object per training step (written as the run goes)
    metrics.csv        the same table, written at the end
    reward_curve.png   reward per step (mean, a rolling mean, the 10th-90th percentile of the step's episodes),
                       and on a second panel the share of completions holding a tool call that could not be parsed
"""

from __future__ import annotations

import csv
import json
import logging
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ..play.binding import Tally
from .rewards import UNPARSED_METRIC

__all__ = ["RunReport", "Summary", "ZERO_SIGNAL_STEPS", "ZERO_SIGNAL_SHARE", "UNPARSED_STEPS", "UNPARSED_SHARE"]

logger = logging.getLogger("envkit.train")

#: From this many steps on, the last this-many steps are checked for a learning signal after each step ...
ZERO_SIGNAL_STEPS = 3
#: ... and a warning (once a run) names the likely cause when at least this share of GRPO groups had one reward
#: for every episode, or no scored episode at all.
ZERO_SIGNAL_SHARE = 0.75

#: A warning (once a run) when, over the last this-many steps, ...
UNPARSED_STEPS = 3
#: ... at least this share of completions held a tool call TRL could not parse (the policy drifting into text the
#: trainer cannot read: no tool runs, so the episode earns nothing).
UNPARSED_SHARE = 0.5

#: TRL's log keys → the names in envkit's metrics files.
_COLUMNS = {
    "reward": "reward",
    "reward_std": "reward_std",
    "tools/call_frequency": "tool_calls_per_episode",
    "tools/failure_frequency": "tool_failure_rate",
    "completions/mean_length": "completion_tokens",
    UNPARSED_METRIC: "unparsed_tool_calls",
    "loss": "loss",
    "learning_rate": "learning_rate",
}


@dataclass
class Summary:
    """The closing figures of a run (also printed as a table, and as JSON with `--json`)."""

    steps: int
    seconds: float
    seconds_per_step: float
    env_share: float
    start: dict[str, float]
    end: dict[str, float]
    episodes: int
    finished: int
    lost: int
    tool_calls: int
    tool_errors: dict[str, int] = field(default_factory=dict)
    lost_reasons: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    stopped: str | None = None
    no_signal: str | None = None
    unparsed: str | None = None
    evaluation: list[Any] = field(default_factory=list)

    def table(self) -> str:
        """The summary as aligned text lines."""
        window = max(1, self.steps // 4)
        lines = [f"{'':28}{'start':>10}   {'end':>10}    (mean of the first and last {window} step(s))"]
        for key in self.start:
            lines.append(f"{key:28}{_fmt(self.start[key]):>10} → {_fmt(self.end.get(key)):>10}")
        lines.append(f"episodes: {self.episodes} played, {self.finished} finished by the environment, "
                     f"{self.lost} lost (session dropped mid-game; unscored)")
        if self.lost_reasons:
            lines.append(f"  lost because: {'; '.join(self.lost_reasons)}")
        if self.tool_errors:
            refused = ", ".join(f"{code} × {count}" for code, count in sorted(self.tool_errors.items()))
            lines.append(f"tool calls: {self.tool_calls}, refused by the environment: {refused}")
        lines.append(f"time: {self.steps} steps in {self.seconds:.1f}s ({self.seconds_per_step:.2f} s/step, "
                     f"{self.env_share:.0%} of it waiting for the environment)")
        if self.evaluation:
            from ..play.table import render_table

            lines.append(render_table(self.evaluation))
        for name, path in self.files.items():
            lines.append(f"{name}: {path}")
        for warning in (self.no_signal, self.unparsed):
            if warning:
                lines.append(f"warning: {warning}")
        if self.stopped:
            lines.append(f"stopped early: {self.stopped}")
        return "\n".join(lines)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _number(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


class RunReport(TrainerCallback):
    """A transformers callback: one line per step (with a progress bar when `stream` is a terminal), metrics
    written as they come, and one warning if the first steps show no learning signal.

    `budget`: the run's (tool-calling turns, completion tokens) per episode, and `episode_length` the tool calls
    an episode of the environments takes (None: no set length), named in that warning.
    """

    def __init__(self, output_dir: Path, tally: Tally, max_steps: int, reward_names: list[str], *,
                 show: bool = True, stream: Any = None, budget: tuple[int, int] | None = None,
                 episode_length: int | None = None) -> None:
        self.output_dir = output_dir
        self.tally = tally
        self.max_steps = max_steps
        self.budget = budget
        self.episode_length = episode_length
        self.zero_signal: str | None = None
        self.unparsed: str | None = None
        #: Steps at which a warning fired, marked on the plot.
        self.warned_at: list[tuple[int, str]] = []
        self.columns = {**_COLUMNS, **{f"rewards/{name}/mean": name for name in reward_names}}
        self.show = show
        self.stream = stream if stream is not None else sys.stderr
        self.rows: list[dict[str, Any]] = []
        self.metrics_path = output_dir / "metrics.jsonl"
        self._bar: Any = None
        self._started = self._last = time.perf_counter()
        self._env_mark = 0.0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        from tqdm.auto import tqdm

        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path.write_text("")
        self._started = self._last = time.perf_counter()
        self._env_mark = self.tally.env_seconds
        if not self.show or not _is_terminal(self.stream):
            return
        self._bar = tqdm(total=self.max_steps, desc="envkit train", unit="step", file=self.stream,
                         dynamic_ncols=True, leave=False)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not logs or "reward" not in logs:
            return
        now = time.perf_counter()
        row: dict[str, Any] = {"step": state.global_step}
        # a value TRL could not compute (every episode of the step lost) is NaN, or None once logged: null here
        row.update({column: _number(logs[key]) for key, column in self.columns.items() if key in logs})
        if "frac_reward_zero_std" in logs:
            row["zero_std_groups"] = _number(logs["frac_reward_zero_std"])
        if "completions/clipped_ratio" in logs:
            row["clipped_ratio"] = _number(logs["completions/clipped_ratio"])
        for key, column in (("reward/p10", "reward_p10"), ("reward/p90", "reward_p90")):
            if key in logs:
                row[column] = _number(logs[key])
        row.update(episodes_lost=self.tally.lost, step_seconds=round(now - self._last, 4),
                   env_seconds=round(self.tally.env_seconds - self._env_mark, 4))
        self._last, self._env_mark = now, self.tally.env_seconds
        self.rows.append(row)
        with self.metrics_path.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        line = (f"step {row['step']:>4}/{self.max_steps}  reward {_fmt(row['reward']):>8}  "
                f"tool calls/episode {_fmt(row.get('tool_calls_per_episode'), 2):>5}  lost {self.tally.lost}  "
                f"{row['step_seconds']:.2f}s")
        if self._bar is not None:
            self._bar.write(line, file=self.stream)
            self._bar.set_postfix_str(f"reward {_fmt(row['reward'])}", refresh=False)
            self._bar.update(1)
        elif self.show:
            print(line, file=self.stream, flush=True)
        if len(self.rows) >= ZERO_SIGNAL_STEPS and self.zero_signal is None:
            self._check_signal(self.rows[-ZERO_SIGNAL_STEPS:])
            if self.zero_signal is not None:
                self.warned_at.append((row["step"], "no learning signal"))
        if len(self.rows) >= UNPARSED_STEPS and self.unparsed is None:
            self._check_unparsed(self.rows[-UNPARSED_STEPS:])

    def _check_unparsed(self, window: list[dict[str, Any]]) -> None:
        """Warn once when many completions of the last steps held a tool call TRL could not parse: the policy is
        collapsing into text the trainer cannot read. Names what was seen and the likely causes."""
        share = _mean(row.get("unparsed_tool_calls") for row in window)
        if math.isnan(share) or share < UNPARSED_SHARE:
            return
        first, last = _mean(row.get("completion_tokens") for row in self.rows[:UNPARSED_STEPS]), \
            _mean(row.get("completion_tokens") for row in window)
        clipped = _mean(row.get("clipped_ratio") for row in window)
        tokens = self.budget[1] if self.budget else None
        seen = [f"{share:.0%} of completions held a <tool_call> that could not be parsed (so no tool ran for it)"]
        if not math.isnan(first) and not math.isnan(last):
            seen.append(f"completions grew from {first:.0f} to {last:.0f} tokens")
        if not math.isnan(clipped):
            seen.append(f"{clipped:.0%} cut at {tokens} tokens" if tokens else f"{clipped:.0%} cut")
        causes = ["a learning rate too high for the model (lower --learning-rate)",
                  "a token budget that cuts tool calls mid-way (raise --max-completion-length)"
                  if not math.isnan(clipped) and clipped >= 0.2 else
                  "a token budget that leaves room for rambling (lower --max-completion-length)",
                  "sampling too hot (lower --temperature)"]
        steps = f"steps {window[0]['step']}-{window[-1]['step']}"
        self.unparsed = (f"tool calls the trainer cannot parse: in {steps}, {'; '.join(seen)}. "
                         f"Likely causes: {'; or '.join(causes)}.")
        self.warned_at.append((window[-1]["step"], "unparsed tool calls"))
        logger.warning("%s", self.unparsed)

    def _check_signal(self, window: list[dict[str, Any]]) -> None:
        """Warn once when most GRPO groups of the last steps had the same reward for every episode (or no scored
        episode): no advantage, no gradient. Names what was seen (finished episodes, tool calls against the
        budget, cut completions) and the likely cause."""
        shares = [1.0 if row.get("reward") is None else row.get("zero_std_groups") for row in window]
        shares = [share for share in shares if isinstance(share, (int, float))]
        if not shares or sum(shares) / len(shares) < ZERO_SIGNAL_SHARE:
            return
        tally = self.tally
        finished = tally.finished / tally.episodes if tally.episodes else 0.0
        calls = tally.tool_calls / tally.episodes if tally.episodes else 0.0
        clipped = _mean(row.get("clipped_ratio") for row in window)
        turns, tokens = self.budget or (None, None)
        seen = [f"{finished:.0%} of {tally.episodes} episodes finished by the environment"
                + (f" (an episode takes {self.episode_length} tool calls)" if self.episode_length else ""),
                f"{calls:.1f} tool calls per episode" + (f" against a budget of {turns} turns" if turns else "")]
        if not math.isnan(clipped):
            seen.append(f"{clipped:.0%} of completions cut at {tokens} tokens" if tokens else
                        f"{clipped:.0%} of completions cut")
        causes = []
        if turns and self.episode_length and turns < self.episode_length:
            causes.append(f"the turn budget ({turns}) is shorter than an episode ({self.episode_length} tool calls): "
                          f"raise --max-tool-calling-iterations to {self.episode_length + 2} or more")
        elif turns and calls >= 0.8 * turns:
            causes.append("the turn budget runs out: raise --max-tool-calling-iterations")
        if not math.isnan(clipped) and clipped >= 0.2:
            causes.append("the token budget cuts episodes short: raise --max-completion-length")
        if self.episode_length and finished < 0.5 and not causes:
            causes.append("the model stops calling tools before the game ends: a model that plays whole episodes "
                          "(more warm-up, a larger model) or a reward that scores unfinished ones")
        if not causes:
            causes.append("every episode of a group scores the same: a reward with more levels, or more "
                          "--num-generations per group")
        steps = f"steps {window[0]['step']}-{window[-1]['step']}"
        self.zero_signal = (f"no learning signal: in {sum(shares) / len(shares):.0%} of GRPO groups of {steps} every "
                            "episode got the same reward (or none was scored), so their advantage and loss are 0. "
                            f"Seen so far: {'; '.join(seen)}. Likely cause: {'; or '.join(causes)}.")
        logger.warning("%s", self.zero_signal)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.close_bar()

    def close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def finish(self, stopped: str | None = None) -> Summary:
        """Write the CSV and the plot, and return the summary."""
        self.close_bar()
        self.output_dir.mkdir(parents=True, exist_ok=True)
        files: dict[str, str] = {}
        if self.rows:
            files["metrics"] = str(self.metrics_path)
            files["metrics (csv)"] = str(self._write_csv())
            files["reward curve"] = str(self._plot())
        keys = [column for column in self.columns.values() if column not in ("loss", "learning_rate", "reward_std")
                and any(column in row for row in self.rows)]
        window = max(1, len(self.rows) // 4)
        seconds = time.perf_counter() - self._started
        step_seconds = sum(row["step_seconds"] for row in self.rows)
        env_seconds = sum(row["env_seconds"] for row in self.rows)
        return Summary(
            steps=len(self.rows), seconds=seconds, seconds_per_step=step_seconds / max(1, len(self.rows)),
            env_share=env_seconds / step_seconds if step_seconds else 0.0,
            start={key: _mean(row.get(key) for row in self.rows[:window]) for key in keys},
            end={key: _mean(row.get(key) for row in self.rows[-window:]) for key in keys},
            episodes=self.tally.episodes, finished=self.tally.finished, lost=self.tally.lost,
            tool_calls=self.tally.tool_calls, tool_errors=dict(self.tally.error_codes),
            lost_reasons=sorted(set(self.tally.lost_reasons)), files=files, stopped=stopped, no_signal=self.zero_signal,
            unparsed=self.unparsed)

    def _write_csv(self) -> Path:
        path = self.output_dir / "metrics.csv"
        header: list[str] = []
        for row in self.rows:
            header.extend(key for key in row if key not in header)
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=header)
            writer.writeheader()
            writer.writerows(self.rows)
        return path

    def _plot(self) -> Path:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        path = self.output_dir / "reward_curve.png"
        steps = [row["step"] for row in self.rows]
        mean = [_value(row.get("reward")) for row in self.rows]
        figure, (axes, lower) = plt.subplots(2, 1, figsize=(7, 5.5), dpi=100, sharex=True,
                                             gridspec_kw={"height_ratios": [3, 1]})
        low = [_value(row.get("reward_p10")) for row in self.rows]
        high = [_value(row.get("reward_p90")) for row in self.rows]
        if any(not math.isnan(value) for value in low):
            axes.fill_between(steps, low, high, alpha=0.2, label="10th-90th percentile of episodes")
        axes.plot(steps, mean, marker="o", markersize=3, linewidth=1, alpha=0.6, label="reward (mean)")
        axes.plot(steps, _rolling(mean, ROLLING_STEPS), linewidth=2.5,
                  label=f"rolling mean ({ROLLING_STEPS} steps)")
        functions = [column for key, column in self.columns.items() if key.startswith("rewards/")]
        if len(functions) > 1:
            for name in functions:
                axes.plot(steps, [_value(row.get(name)) for row in self.rows], linestyle="--", label=name)
        for step, what in self.warned_at:
            for panel in (axes, lower):
                panel.axvline(step, color="tab:red", linestyle=":", linewidth=1.5)
            axes.annotate(f"warning: {what}", (step, 1), xycoords=("data", "axes fraction"), color="tab:red",
                          fontsize=8, ha="right", va="top", rotation=90)
        axes.set_ylabel("reward")
        axes.set_title("envkit train: reward per step")
        axes.grid(alpha=0.3)
        axes.legend(loc="best", fontsize=8)
        lower.plot(steps, [_value(row.get("unparsed_tool_calls")) for row in self.rows], color="tab:red",
                   marker=".", label="completions with an unparsed tool call")
        lower.set_ylim(0, 1)
        lower.set_xlabel("step")
        lower.set_ylabel("unparsed share")
        lower.grid(alpha=0.3)
        lower.legend(loc="upper left", fontsize=8)
        figure.tight_layout()
        figure.savefig(path)
        plt.close(figure)
        return path


#: Steps in the rolling mean drawn over the per-step reward.
ROLLING_STEPS = 5


def _value(value: Any) -> float:
    return math.nan if value is None else float(value)


def _rolling(values: list[float], width: int) -> list[float]:
    """The mean of each value and up to `width - 1` before it (NaNs left out)."""
    return [_mean(values[max(0, index - width + 1): index + 1]) for index in range(len(values))]


def _is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def _mean(values: Any) -> float:
    numbers = [float(value) for value in values if isinstance(value, (int, float)) and not math.isnan(value)]
    return sum(numbers) / len(numbers) if numbers else math.nan
