"""Tables and a chart from the side-by-side results (`side_by_side.json`).

    python benchmarks/report.py benchmarks/results/side_by_side.json    # re-render without re-running
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

ORDER = ["envkit", "openenv", "fastapi", "picows"]


def _median(runs: list[dict[str, Any]], pick: Callable[[dict[str, Any]], float | None]) -> float | None:
    values = [value for value in map(pick, runs) if value is not None]
    return statistics.median(values) if values else None


def summarise(server: dict[str, Any]) -> dict[str, Any]:
    """Median steps/s and p99 per level (over rounds), plus the per-server checks."""
    rate = {int(level): _median(runs, lambda run: run["steps_per_s"]) for level, runs in server["runs"].items()}
    p99 = {int(level): _median(runs, lambda run: run["step_latency_ms"]["p99"]) for level, runs in server["runs"].items()}
    loadgen = max(run["loadgen_cpu"] for runs in server["runs"].values() for run in runs)
    return {"label": server["label"], "rate": rate, "p99": p99, "loadgen_max": loadgen, "memory": server.get("memory"),
            "churn": server.get("churn"), "ramp": server.get("ramp")}


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}×"


def tables(report: dict[str, Any]) -> str:
    present = [key for key in ORDER if key in report["servers"]]
    s = {key: summarise(report["servers"][key]) for key in present}
    levels = report["levels"]
    lines = [f"Machine: {report['machine']}; {report['rounds']} interleaved round(s), medians shown.", "",
             "| server | " + " | ".join(f"steps/s @{level}" for level in levels) + " | p99 ms @64 | @1024 ÷ @64 |",
             "| --- |" + " ---: |" * (len(levels) + 2)]
    for key in present:
        rate, p99 = s[key]["rate"], s[key]["p99"]
        lines.append(f"| {s[key]['label']} | " + " | ".join(_num(rate.get(level)) for level in levels) +
                     f" | {_num(p99.get(64), 1)} | {_ratio(rate.get(1024), rate.get(64))} |")
    lines += ["", "| server | ÷ OpenEnv @64 | ÷ OpenEnv @256 | ÷ FastAPI @64 | ÷ picows @64 | ÷ picows @256 |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]

    def rate_of(key: str, level: int) -> float | None:
        return s[key]["rate"].get(level) if key in s else None

    for key in present:
        lines.append(f"| {s[key]['label']} | {_ratio(rate_of(key, 64), rate_of('openenv', 64))} | "
                     f"{_ratio(rate_of(key, 256), rate_of('openenv', 256))} | "
                     f"{_ratio(rate_of(key, 64), rate_of('fastapi', 64))} | "
                     f"{_ratio(rate_of(key, 64), rate_of('picows', 64))} | "
                     f"{_ratio(rate_of(key, 256), rate_of('picows', 256))} |")
    lines += ["", "| server | held open at once (≥95% ok, 60 s) | kB per open session | RSS after close ÷ idle | "
              "threads idle / held | sessions opened+closed/s | load generator CPU (max) |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for key in present:
        memory, churn, ramp = s[key]["memory"] or {}, s[key]["churn"] or {}, s[key]["ramp"] or {}
        lines.append(f"| {s[key]['label']} | {_num(ramp.get('max_sessions_held'))} | "
                     f"{_num(memory.get('kb_per_session'), 1)} | {_num(memory.get('after_vs_idle'), 2)} | "
                     f"{memory.get('threads_idle', '-')} / {memory.get('threads_held', '-')} | "
                     f"{_num(churn.get('sessions_per_s'))} | {s[key]['loadgen_max']:.0%} |")
    if "startup" in report:
        up = report["startup"]
        lines += ["", f"Start-up (median wall time): `python -c pass` {up['python_bare_s']:.3f} s, "
                  f"`import envkit` {up['import_envkit_s']:.3f} s, `envkit --help` {up['envkit_help_s']:.3f} s, "
                  f"`envkit serve echo` to a healthy /health {up['serve_to_healthy_s']:.3f} s."]
    return "\n".join(lines)


def chart(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key in [key for key in ORDER if key in report["servers"]]:
        summary = summarise(report["servers"][key])
        levels = sorted(summary["rate"])
        left.plot(levels, [summary["rate"][level] for level in levels], marker="o", label=summary["label"])
        right.plot(levels, [summary["p99"][level] for level in levels], marker="o", label=summary["label"])
    for axis, title in ((left, "steps/s (higher is better)"), (right, "p99 step latency, ms (lower is better)")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("concurrent sessions")
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
    right.set_yscale("log")
    left.legend()
    figure.suptitle("Echo environment, one server process on one core, load on the other", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def render(report: dict[str, Any], out: Path) -> str:
    """Write table.md and side_by_side.png under `out`; returns the table."""
    text = tables(report)
    (out / "table.md").write_text(text + "\n")
    chart(report, out / "side_by_side.png")
    return text


if __name__ == "__main__":
    results = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results" / "side_by_side.json")
    print(render(json.loads(results.read_text()), results.parent))
