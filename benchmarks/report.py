"""Tables and a chart from the side-by-side results (`side_by_side.json`).

    python benchmarks/report.py benchmarks/results/side_by_side.json    # re-render without re-running
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

ORDER = ["envkit", "openenv", "envkit-openenv", "fastapi", "picows"]
SURFACE_LABELS = {"ws": "`/ws` step", "mcp": "MCP `tools/call` (`/mcp`)", "ors": "ORS `/call` (server-sent events)",
                  "http-floor": "a bare Starlette POST route (the floor of an HTTP call)"}


def _median(runs: list[dict[str, Any]], pick: Callable[[dict[str, Any]], float | None]) -> float | None:
    values = [value for value in map(pick, runs) if value is not None]
    return statistics.median(values) if values else None


def summarise(server: dict[str, Any]) -> dict[str, Any]:
    """Median steps/s, p99 and server CPU per step per level (over rounds), plus the per-server checks."""
    runs = {int(level): level_runs for level, level_runs in server["runs"].items()}
    rate = {level: _median(level_runs, lambda run: run["steps_per_s"]) for level, level_runs in runs.items()}
    p99 = {level: _median(level_runs, lambda run: run["step_latency_ms"]["p99"]) for level, level_runs in runs.items()}
    cpu = {level: _median(level_runs, lambda run: run.get("server_cpu_us_per_step")) for level, level_runs in runs.items()}
    loadgen = max(run["loadgen_cpu"] for level_runs in runs.values() for run in level_runs)
    return {"label": server["label"], "runs": runs, "rate": rate, "p99": p99, "cpu": cpu, "loadgen_max": loadgen,
            "memory": server.get("memory"), "churn": server.get("churn"), "ramp": server.get("ramp")}


def paired_ratio(a: dict[str, Any] | None, b: dict[str, Any] | None, level: int, metric: str = "steps_per_s") -> str:
    """Median over rounds of a/b, each round's runs paired (they ran minutes apart, not hours)."""
    if a is None or b is None or level not in a["runs"] or level not in b["runs"]:
        return "-"
    def value(run: dict[str, Any]) -> float | None:
        return run["step_latency_ms"]["p99"] if metric == "p99" else run[metric]

    ratios = [value(x) / value(y) for x, y in zip(a["runs"][level], b["runs"][level]) if value(x) and value(y)]
    return f"{statistics.median(ratios):.2f}×" if ratios else "-"


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}×"


def tables(report: dict[str, Any]) -> str:
    present = [key for key in ORDER if key in report["servers"]]
    s = {key: summarise(report["servers"][key]) for key in present}
    levels = report["levels"]
    lines = [f"Machine: {report['machine']}; {report['rounds']} interleaved round(s), medians shown.", "",
             "| server | " + " | ".join(f"steps/s @{level}" for level in levels) +
             " | p99 ms @64 | @1024 ÷ @64 | server CPU µs/step @64 |",
             "| --- |" + " ---: |" * (len(levels) + 3)]
    for key in present:
        rate, p99, cpu = s[key]["rate"], s[key]["p99"], s[key]["cpu"]
        lines.append(f"| {s[key]['label']} | " + " | ".join(_num(rate.get(level)) for level in levels) +
                     f" | {_num(p99.get(64), 1)} | {_ratio(rate.get(1024), rate.get(64))} | {_num(cpu.get(64), 1)} |")
    lines += ["", "Ratios of steps/s (and of p99 latency), paired round by round:", "",
              "| server | ÷ OpenEnv @64 | ÷ OpenEnv @1024 | ÷ FastAPI @64 | ÷ FastAPI @1024 | p99 ÷ FastAPI's @64 "
              "| ÷ picows @64 | ÷ picows @1024 |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for key in present:
        cells = [paired_ratio(s[key], s.get(other), level, metric)
                 for other, level, metric in (("openenv", 64, "steps_per_s"), ("openenv", 1024, "steps_per_s"),
                                              ("fastapi", 64, "steps_per_s"), ("fastapi", 1024, "steps_per_s"),
                                              ("fastapi", 64, "p99"), ("picows", 64, "steps_per_s"),
                                              ("picows", 1024, "steps_per_s"))]
        lines.append(f"| {s[key]['label']} | " + " | ".join(cells) + " |")
    surfaces = report.get("surfaces")
    if surfaces:
        lines += ["", f"Surfaces of envkit, {surfaces['sessions']} sessions, {surfaces['rounds']} "
                  "interleaved round(s), medians: one step or tool call each (and a bare Starlette POST route beside "
                  "them)", "",
                  "| surface | calls/s | p99 ms | server CPU µs/call | ÷ `/ws` step (CPU, paired) |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        ws = surfaces["runs"].get("ws") or []
        for name, runs in surfaces["runs"].items():
            cpu = _median(runs, lambda run: run.get("server_cpu_us_per_step_stepping"))
            paired = [run["server_cpu_us_per_step_stepping"] / base["server_cpu_us_per_step_stepping"]
                      for run, base in zip(runs, ws)
                      if run.get("server_cpu_us_per_step_stepping") and base.get("server_cpu_us_per_step_stepping")]
            ratio = f"{statistics.median(paired):.2f}×" if paired else "-"
            rate = _median(runs, lambda run: run["steps_per_s"])
            p99 = _median(runs, lambda run: run["step_latency_ms"]["p99"])
            label = SURFACE_LABELS.get(name, name)
            lines.append(f"| {label} | {_num(rate)} | {_num(p99, 1)} | {_num(cpu, 1)} | {ratio} |")
    lines += ["", "| server | held open at once (≥95% ok, 60 s) | kB per open session | RSS after close ÷ idle | "
              "threads idle / held | sessions opened+closed/s | ÷ OpenEnv | server CPU ms/session | "
              "load generator CPU: churn / steps (max) |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    openenv_churn = (s.get("openenv", {}).get("churn") or {}).get("sessions_per_s")
    for key in present:
        memory, churn, ramp = s[key]["memory"] or {}, s[key]["churn"] or {}, s[key]["ramp"] or {}
        churn_cpu = f"{churn['loadgen_cpu']:.0%}" if "loadgen_cpu" in churn else "-"
        lines.append(f"| {s[key]['label']} | {_num(ramp.get('max_sessions_held'))} | "
                     f"{_num(memory.get('kb_per_session'), 1)} | {_num(memory.get('after_vs_idle'), 2)} | "
                     f"{memory.get('threads_idle', '-')} / {memory.get('threads_held', '-')} | "
                     f"{_num(churn.get('sessions_per_s'))} | {_ratio(churn.get('sessions_per_s'), openenv_churn)} | "
                     f"{_num(churn.get('server_cpu_ms_per_session'), 2)} | {churn_cpu} / {s[key]['loadgen_max']:.0%} |")
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
        axis.set_xticks(report["levels"], [str(level) for level in report["levels"]])
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
