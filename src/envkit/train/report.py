"""What a run shows and leaves behind: a line and a progress bar per step, metrics files, a plot, a summary.

Files in the output directory:

    metrics.jsonl      one JSON object per training step (written as the run goes)
    metrics.csv        the same table, written at the end
    reward_curve.png   reward per step (mean ± std across the step's episodes), per reward function
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from .binding import Tally

__all__ = ["RunReport", "Summary"]

#: TRL's log keys → the names in envkit's metrics files.
_COLUMNS = {
    "reward": "reward",
    "reward_std": "reward_std",
    "tools/call_frequency": "tool_calls_per_episode",
    "tools/failure_frequency": "tool_failure_rate",
    "completions/mean_length": "completion_tokens",
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
            from ..evaluate.table import render_table

            lines.append(render_table(self.evaluation))
        for name, path in self.files.items():
            lines.append(f"{name}: {path}")
        if self.stopped:
            lines.append(f"stopped early: {self.stopped}")
        return "\n".join(lines)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _number(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


class RunReport(TrainerCallback):
    """A transformers callback: one line and a progress bar update per step, metrics written as they come."""

    def __init__(self, output_dir: Path, tally: Tally, max_steps: int, reward_names: list[str], *,
                 show: bool = True, stream: Any = None) -> None:
        self.output_dir = output_dir
        self.tally = tally
        self.max_steps = max_steps
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
        if not self.show:
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
            lost_reasons=sorted(set(self.tally.lost_reasons)), files=files, stopped=stopped)

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
        mean = [math.nan if row["reward"] is None else row["reward"] for row in self.rows]
        std = [row.get("reward_std") or 0.0 for row in self.rows]
        figure, axes = plt.subplots(figsize=(7, 4), dpi=100)
        axes.plot(steps, mean, marker="o", label="reward (mean)")
        axes.fill_between(steps, [m - s for m, s in zip(mean, std, strict=True)],
                          [m + s for m, s in zip(mean, std, strict=True)], alpha=0.2, label="± std")
        functions = [column for key, column in self.columns.items() if key.startswith("rewards/")]
        if len(functions) > 1:
            for name in functions:
                values = [row.get(name) for row in self.rows]
                axes.plot(steps, [math.nan if value is None else value for value in values], linestyle="--",
                          label=name)
        axes.set_xlabel("step")
        axes.set_ylabel("reward")
        axes.set_title("envkit train: reward per step")
        axes.grid(alpha=0.3)
        axes.legend(loc="best")
        figure.tight_layout()
        figure.savefig(path)
        plt.close(figure)
        return path


def _mean(values: Any) -> float:
    numbers = [float(value) for value in values if isinstance(value, (int, float)) and not math.isnan(value)]
    return sum(numbers) / len(numbers) if numbers else math.nan
