"""Regression guards for learning: the main job (`envkit train`, no flags) must visibly learn, and the unparsed
tool-call warning must fire when a policy collapses into text the trainer cannot read.

Offline and on CPU: the tiny model is built here from nothing (HF_HUB_OFFLINE=1), echo is served in the process.
The margins were measured over seeds 0 to 3 of the main job (30 steps, 32 episodes a step in groups of 16,
learning rate 1.5e-3 reached over 3 steps) on 2 cores, when it trained on seeded rows: mean reward of the first 5
steps → the last 5, tool calls per episode and the share of completions with an unparsed tool call in the same steps:

    seed 0   1.027 →  5.239 (×5.10)   calls 1.84 → 2.86    unparsed 0.06 → 0.08
    seed 1   1.984 →  7.414 (×3.74)   calls 2.41 → 2.91    unparsed 0.10 → 0.03
    seed 2   1.279 → 37.311 (×29.2)   calls 2.38 → 22.2    unparsed 0.03 → 0.36   (several calls a turn)
    seed 3   0.513 →  2.927 (×5.70)   calls 1.73 → 2.64    unparsed 0.04 → 0.25

On echo's eight train messages, as it trains now (seed 3 not run):

    seed 0   0.977 →  4.900 (×5.01)   calls 1.76 → 2.83    unparsed 0.06 → 0.06
    seed 1   1.949 →  7.452 (×3.82)   calls 2.43 → 2.93    unparsed 0.09 → 0.07
    seed 2   1.314 → 16.385 (×12.5)   calls 2.39 → 10.1    unparsed 0.02 → 0.18   (several calls a turn)

The same runs on a second 2-core machine (another CPU: the same first step, then sums that round differently):

    seed 0   1.007 →  4.824 (×4.79)
    seed 1   1.946 →  5.538 (×2.85)
    seed 2   1.096 →  4.791 (×4.37)

The guard asks for ×2.5 (the lowest seed on either machine gives ×2.85) and a rise of at least 1.5 (lowest +2.41),
more tool calls, and at most half of the last 5 steps' completions unparsed (highest 0.36; half is where
`envkit train` warns). The recipe before (16 episodes a step in groups of 8, learning rate 1e-3 from the first
step) gave ×2.48, ×4.10 and ×3.44 on seeds 0-2: the guard fails on seed 0. At a learning rate of 2e-3 seed 1
collapsed (0.205 → 0.000, no tool call after step 2).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from test_train_fit import report_rows

from envkit.play.binding import Tally
from envkit.train.report import RunReport
from envkit.train.rewards import has_unparsed_tool_call
from envkit.train.runner import run
from envkit.train.settings import TrainSettings

#: The last 5 steps' mean reward must be at least this many times the first 5 steps' ...
GAIN = 2.5
#: ... and this much more ...
RISE = 1.5
#: ... and in the last 5 steps at most this share of completions may hold a tool call the trainer could not parse.
UNPARSED_BOUND = 0.5
#: Catch (`envkit train --env catch --learning-rate 1e-3`, seed 0): the last 10 steps' mean reward must beat the
#: first 10's by this much.
CATCH_MARGIN = 0.25
#: Catch's learning rate in the guard (the games' default is 2e-4; see `model_defaults`).
CATCH_LEARNING_RATE = 1e-3

#: Wordle (`envkit train --env wordle`, seed 0): the sampled `played` reward of the last 10 steps must beat the first
#: 10's by this much, and the share of completions holding a tool call TRL could not parse must fall by this much.
WORDLE_PLAYED_RISE = 0.05
WORDLE_UNPARSED_FALL = 0.2


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_main_job_learns(tmp_path: Path, seed: int) -> None:
    """The main job's reward rises several-fold, with tool calls parsed: a seeded run of the default settings.

    Fails on a policy that learns too slowly (the former recipe's seed 0: ×2.48) or collapses (reward falling to 0
    once the model stops emitting tool calls TRL can parse, as a learning rate of 2e-3 made seed 1 do after its
    first step). Figures per seed in the module's notes."""
    rows = trained_rows(tmp_path, 30, seed=seed)
    first, last = mean(rows[:5], "reward"), mean(rows[-5:], "reward")
    assert last >= GAIN * first and last >= first + RISE, (first, last)
    assert mean(rows[-5:], "unparsed_tool_calls") <= UNPARSED_BOUND, [row["unparsed_tool_calls"] for row in rows]
    assert mean(rows[-5:], "tool_calls_per_episode") > mean(rows[:5], "tool_calls_per_episode")


@pytest.mark.timeout(900)   # two to five minutes on 2 cores, more while other work loads them
def test_catch_learns(tmp_path: Path) -> None:
    """`envkit train --env catch --learning-rate 1e-3`, seeded: the mean reward of the last 10 of its 40 steps beats
    the first 10's.

    Measured over seeds 0-2 on seeded rows, before training kept to Catch's train split (32 episodes a step in groups
    of 16, learning rate 1e-3 reached over 3 steps; reward from -1, a miss or an abandoned game, to +1, a catch),
    first 10 steps → last 10, and tool calls per episode:

        seed 0   -0.419 → 0.156 (+0.575)   calls 8.30 → 10.11
        seed 1   -0.225 → 0.125 (+0.350)   calls 5.96 → 7.31
        seed 2   -0.200 → 0.075 (+0.275)   calls 7.87 → 9.77

    With a learning rate of 1e-9 (a model that does not move) seed 0 gives -0.400 → -0.269 (+0.131): that much a
    10-step mean drifts by chance. The margin, 0.25, is below every seed's gain and about twice that drift; the
    guard fails on the run at 1e-9. Seed 0 only: a catch run takes two to five minutes on 2 cores."""
    rows = trained_rows(tmp_path, 40, env=["catch"], seed=0, learning_rate=CATCH_LEARNING_RATE)
    first, last = mean(rows[:10], "reward"), mean(rows[-10:], "reward")
    assert last >= first + CATCH_MARGIN, (first, last)


@pytest.mark.timeout(1500)   # 15 minutes were not enough while some twenty other processes shared the 2 cores
def test_wordle_training_makes_sampled_guesses_well_formed(tmp_path: Path) -> None:
    """`envkit train --env wordle`, seeded, on its train secrets: the sampled play improves, not the wins.

    Measured over seeds 0 and 1 (the defaults: 40 steps of 32 episodes in groups of 16 at 2e-4, rewarded by Wordle's
    `played`), first 10 steps → last 10: `played` reward and the share of completions with an unparsed tool call:

        seed 0   0.001 → 0.072 (+0.071)   unparsed 0.753 → 0.312 (-0.441)
        seed 1   0.013 → 0.092 (+0.079)   unparsed 0.459 → 0.188 (-0.271)

    Greedy play on 30 test games gets worse on both seeds (2/30 → 0/30, 1/30 → 0/30; docs/evaluation.md), so this
    guards what training does do. At a learning rate of 1e-9 (a model that does not move) seed 0 gives 0.007 → 0.032
    (+0.025) and unparsed 0.747 → 0.666 (-0.081): the margins, +0.05 and -0.2, lie between that drift and every
    trained seed, and the guard fails on that run. Seed 0 only: a run takes four to nine minutes on 2 cores."""
    rows = trained_rows(tmp_path, 40, env=["wordle"], seed=0)
    first, last = mean(rows[:10], "wordle_played"), mean(rows[-10:], "wordle_played")
    assert last >= first + WORDLE_PLAYED_RISE, (first, last)
    unparsed = mean(rows[:10], "unparsed_tool_calls"), mean(rows[-10:], "unparsed_tool_calls")
    assert unparsed[0] - unparsed[1] >= WORDLE_UNPARSED_FALL, unparsed


def trained_rows(tmp_path: Path, steps: int, **settings: Any) -> list[dict[str, float]]:
    """The metrics rows of a `envkit train` run with `settings` (else the defaults), checked to have `steps` rows."""
    summary = run(TrainSettings(output_dir=str(tmp_path / "out"), save_model=False, transcripts_per_step=0,
                                **settings), say=lambda message: None, show_steps=False)
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == summary.steps == steps and summary.lost == 0
    return rows


def mean(rows: list[dict[str, float]], column: str) -> float:
    return sum(row[column] for row in rows) / len(rows)


def test_unparsed_tool_calls_are_recognised() -> None:
    parsed = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "echo",
                                                                                                   "arguments": {}}}]}]
    raw = [{"role": "assistant", "content": '<tool_call>\n{"name": "echo", "arguments": {"message": "hi"}\n'}]
    assert not has_unparsed_tool_call(parsed) and has_unparsed_tool_call(raw)
    assert has_unparsed_tool_call([*parsed, {"role": "tool", "content": "x"}, *raw])
    assert has_unparsed_tool_call("text <tool_call> broken") and not has_unparsed_tool_call("Done.")


def test_a_collapse_into_unparsed_tool_calls_warns_once_and_is_plotted(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    report = RunReport(tmp_path, Tally(), 6, [], show=False, budget=(3, 128))
    healthy = {"reward": 1.0, "tools/unparsed_share": 0.0, "completions/mean_length": 13.0,
               "reward/p10": 0.5, "reward/p90": 2.0}
    collapsed = {"reward": 0.2, "tools/unparsed_share": 0.9, "completions/mean_length": 71.0,
                 "completions/clipped_ratio": 0.1, "reward/p10": 0.0, "reward/p90": 0.4}
    with caplog.at_level(logging.WARNING, logger="envkit.train"):
        report_rows(report, [healthy, healthy, healthy, collapsed, collapsed, collapsed])
    warnings = [record.getMessage() for record in caplog.records if "cannot parse" in record.getMessage()]
    assert len(warnings) == 1 and report.warned_at == [(5, "unparsed tool calls")]
    assert "in steps 3-5, 60% of completions held a <tool_call> that could not be parsed" in warnings[0]
    assert "completions grew from 13 to 52 tokens" in warnings[0]
    assert "--learning-rate" in warnings[0] and "--temperature" in warnings[0]
    assert [row["unparsed_tool_calls"] for row in report.rows] == [0.0, 0.0, 0.0, 0.9, 0.9, 0.9]
    assert report.rows[0]["reward_p10"] == 0.5 and report.rows[0]["reward_p90"] == 2.0
    summary = report.finish()
    assert summary.unparsed == warnings[0] and f"warning: {warnings[0]}" in summary.table()
    assert summary.end["unparsed_tool_calls"] == pytest.approx(0.9)
    assert (tmp_path / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_healthy_run_does_not_warn_of_unparsed_calls(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    report = RunReport(tmp_path, Tally(), 5, [], show=False)
    with caplog.at_level(logging.WARNING, logger="envkit.train"):
        report_rows(report, [{"reward": 1.0, "tools/unparsed_share": 0.1, "frac_reward_zero_std": 0.0}] * 5)
    assert report.unparsed is None and not caplog.records
