"""The tiny model's warm-up on mini-batches against every episode at every step: wall time and final loss.

    nice -n 10 python benchmarks/warm_up.py                   # wordle and catch, seed 0
    nice -n 10 python benchmarks/warm_up.py --env wordle --seed 1

For each environment, served in this process as `envkit train` serves it: the rows `envkit train --env NAME
--seed SEED` trains on (its train split), and the tiny model built from them twice, the same seed both times,
once with `TinyModelSpec`'s mini-batches and once with one batch as large as every episode (the warm-up before
mini-batches). Prints the build's time without the scripted games' play (tokenizer, encoding, the 100 warm-up
steps) and the last step's loss.
"""

from __future__ import annotations

import argparse
import dataclasses

from envkit.app.targets import resolve_target
from envkit.play.binding import bind
from envkit.play.embedded import serve_envs
from envkit.play.tasks import task_prompt
from envkit.play.tiny import TinyModelSpec, build_tiny_model
from envkit.train.runner import training_data
from envkit.train.settings import TrainSettings


def measure(env: str, seed: int) -> list[tuple[str, float, float]]:
    """(label, seconds without play, last loss) for mini-batches and for every episode at every step."""
    import torch

    torch.set_num_threads(1)   # as envkit train does for the tiny model on CPU
    resolved = resolve_target(env)
    settings = TrainSettings(env=[env], seed=seed).resolved()
    spec = TinyModelSpec(seed=seed)
    results = []
    with serve_envs([env], 1) as urls:
        classes = {name: bind(url, name=name) for name, url in urls.items()}
        prompts = {name: task_prompt(name, cls.metadata) for name, cls in classes.items()}
        rows = training_data(settings, classes, prompts, say=lambda message: None)
        for label, size in (("mini-batches", spec.warmup_batch_size), ("every episode", 10**9)):
            _, _, figures = build_tiny_model(classes, rows, dataclasses.replace(spec, warmup_batch_size=size),
                                             players={resolved.name: resolved.env_class})
            results.append((label, figures["build_seconds"] - figures["play_seconds"], figures["warmup_loss"]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", action="append", help="environments (default: wordle and catch)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"{'env':8}  {'warm-up':14}  {'seconds':>8}  {'last loss':>9}")
    for env in args.env or ["wordle", "catch"]:
        for label, seconds, loss in measure(env, args.seed):
            print(f"{env:8}  {label:14}  {seconds:8.1f}  {loss:9.3f}")


if __name__ == "__main__":
    main()
