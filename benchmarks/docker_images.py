"""The project's images on a real Docker engine: build times, and `from_docker_image` to the first reset.

    sudo bash scripts/docker_engine.sh start          # the engine (and python:3.11-slim), as the suite uses it
    python benchmarks/docker_images.py                # about 10 minutes on 2 cores
    python benchmarks/docker_images.py --starts 5     # fewer starts per image

Builds, each from scratch (`docker build --no-cache --network host`, the legacy builder): the top-level image, each
bundled env's Space image (staged by `envkit push --dry-run`) and a fresh `envkit new` env's. Then, per image, the
time from `EnvClient.from_docker_image(image)` to the end of the first `reset()` (container created and started,
`/health` answered, WebSocket opened, episode reset), `--starts` times one after another; p50 and p95. Writes
`benchmarks/results/docker_images.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envkit import EnvClient
from envkit.app.targets import bundled_envs

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "docker_images.json"
ENGINE = f"unix://{os.environ.get('ENVKIT_DOCKER_DIR', '/tmp/envkit-docker')}/docker.sock"
#: Figures measured by hand when the engine was first tried here: the top-level build, `docker run` to `/health`.
REFERENCE = {"root build s": 21.0, "run to /health s": 1.2}


def envkit(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "envkit.cli", *args], check=True, capture_output=True, timeout=600)


def build(tag: str, context: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["docker", "build", "--no-cache", "--network", "host", "--quiet", "--tag", tag, str(context)],
                   check=True, capture_output=True, timeout=1200, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    return time.perf_counter() - started


def first_reset_s(image: str) -> float:
    started = time.perf_counter()
    with EnvClient.from_docker_image(image).sync() as env:
        env.reset()
        elapsed = time.perf_counter() - started
    return elapsed


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=20, help="from_docker_image starts per image")
    args = parser.parse_args()
    os.environ.setdefault("DOCKER_HOST", ENGINE)

    images: dict[str, Path] = {"benchmark-root": REPO}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        envkit("new", "bench_env", "--output-dir", str(work))
        folders = {**{name: folder for name, folder in bundled_envs().items()}, "bench_env": work / "bench_env"}
        for name, folder in folders.items():
            stage = work / f"space-{name}"
            envkit("push", str(folder), "--dry-run", "--stage-dir", str(stage))
            images[f"benchmark-{name.replace('_', '-')}"] = stage
        builds = {}
        for tag, context in images.items():
            builds[tag] = build(tag, context)
            print(f"build {tag:<24} {builds[tag]:6.1f} s", flush=True)

    starts = {}
    for tag in images:
        times = [first_reset_s(tag) for _ in range(args.starts)]
        starts[tag] = {"p50": statistics.median(times), "p95": percentile(times, 0.95), "runs": len(times)}
        print(f"from_docker_image {tag:<24} to first reset p50 {starts[tag]['p50']:.2f} s  "
              f"p95 {starts[tag]['p95']:.2f} s  ({len(times)} starts)", flush=True)
    print(f"references: top-level build {REFERENCE['root build s']} s, docker run to /health "
          f"{REFERENCE['run to /health s']} s (measured by hand on this kind of machine)")
    RESULTS.write_text(json.dumps({"builds_s": builds, "first_reset_s": starts, "reference": REFERENCE}, indent=2)
                       + "\n")


if __name__ == "__main__":
    main()
