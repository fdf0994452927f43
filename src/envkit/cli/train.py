"""`envkit train`: GRPO (TRL) against served environments, with no wrapper code to write."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import click

from .api_key import api_key_option


def _json_mapping(ctx: click.Context, param: click.Parameter, value: str | None) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as error:
        raise click.BadParameter(f"not JSON ({error.msg}); e.g. '{{\"enable_thinking\": false}}'") from None
    if not isinstance(parsed, dict):
        raise click.BadParameter("expected a JSON object, e.g. '{\"enable_thinking\": false}'")
    return parsed


@click.command("train")
@click.option("--env", "env", multiple=True, metavar="NAME",
              help="Environment to train on: a bundled env (echo, wordle, catch), an env folder or module:Class. "
                   "Repeat for several (rows are routed per environment). [default: echo]")
@click.option("--env-url", "env_url", multiple=True, metavar="URL",
              help="Train against a running server instead of serving --env in this process. Repeatable; pairs "
                   "with --env names in order. One environment on several servers: separate their URLs with commas "
                   "or give a registry (http://HEAD:PORT/replicas); each episode opens on the least-loaded server.")
@click.option("--model", default=None, metavar="MODEL",
              help="'tiny' (a model of 100-200K parameters built here, offline, in seconds), a local path, or a Hub "
                   "id. [default: tiny]")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="YAML file of settings (same names as these flags, plus a 'grpo:' table of GRPOConfig fields), or "
                   "a shipped recipe's name: wordle-grpo (TRL's Wordle guide).")
@click.option("--output-dir", default=None,
              help="Where the model, metrics and plot go. [default: envkit-train, or envkit-train-2, -3, ... when it "
                   "holds an earlier run]")
@click.option("--overwrite", is_flag=True, default=None,
              help="Replace an earlier run's files in --output-dir (without it, a named folder that holds a run is "
                   "refused).")
@click.option("--max-steps", type=int, default=None,
              help="Training steps. [default: tiny: 40 on games with an episode length (catch, wordle), else 30; "
                   "others: 200]")
@click.option("--learning-rate", type=float, default=None,
              help="[default: tiny: 2e-4 on games with an episode length, else 1.5e-3; others: 1e-6]")
@click.option("--num-generations", type=int, default=None, help="Episodes per prompt, compared by GRPO. [default: 16 for tiny, else 8]")
@click.option("--batch-size", type=int, default=None,
              help="Episodes per device per step (a multiple of --num-generations). [default: 32 for tiny, else 8]")
@click.option("--gradient-accumulation-steps", type=int, default=None, help="[default: 1]")
@click.option("--max-completion-length", type=int, default=None,
              help="Token budget of a whole episode, tool results included. [default: fitted to the environment's "
                   "episode length; else 128 for tiny, 1024 for others]")
@click.option("--max-tool-calling-iterations", type=int, default=None,
              help="Model turns that call tools, per episode, at most. [default: the environment's episode length + 2; "
                   "else 3 for tiny, 10 for others]")
@click.option("--temperature", type=float, default=None, help="Sampling temperature. [default: 1.0]")
@click.option("--beta", type=float, default=None, help="KL coefficient (0: no reference model). [default: 0]")
@click.option("--enable-thinking/--disable-thinking", default=None,
              help="Chat template's enable_thinking (Qwen3 and similar). [default: the template's; off for tiny]")
@click.option("--chat-template-kwargs", callback=_json_mapping, default=None, metavar="JSON",
              help="Extra chat template arguments, as a JSON object.")
@click.option("--vllm-mode", type=click.Choice(["none", "colocate", "server"]), default=None,
              help="Generate with vLLM (a GPU, or vLLM's CPU build): in the training process (colocate) or a "
                   "`trl vllm-serve` server (GPU only). "
                   "[default: none]")
@click.option("--vllm-gpu-memory-utilization", type=float, default=None,
              help="Share of GPU memory vLLM may take in colocate mode. [default: 0.3]")
@click.option("--vllm-max-model-length", type=int, default=None, help="vLLM context length (prompt + episode).")
@click.option("--vllm-sleep/--no-vllm-sleep", "vllm_enable_sleep_mode", default=None,
              help="Offload vLLM's weights and cache during optimizer steps (colocate). [default: off]")
@click.option("--vllm-kv-cache-gib", type=int, default=None, metavar="GIB",
              help="vLLM's CPU build: host memory for its KV cache, in GiB (sets VLLM_CPU_KVCACHE_SPACE). "
                   "[default: $VLLM_CPU_KVCACHE_SPACE, else 1 for tiny, 4 for others]")
@click.option("--vllm-server-url", default=None, help="URL of the vLLM server (server mode).")
@click.option("--reward", "reward", multiple=True, metavar="SPEC",
              help="Reward: env (the environment's own), a documented component (win, wordle.win), or "
                   "module:function; add =WEIGHT to weigh it. Repeatable. [default: the rewards each environment "
                   "declares for training (wordle: played), else env]")
@click.option("--dataset", default=None, type=click.Path(dir_okay=False),
              help="JSONL or CSV rows; their columns reach the environment's reset (prompt and environment "
                   "columns are optional).")
@click.option("--num-episodes", type=int, default=None,
              help="Without --dataset: how many episodes (rows) the environments provide. [default: 64 seeds; with "
                   "tasks (--split, or an Open Reward Standard server): every task once]")
@click.option("--split", default=None, metavar="NAME",
              help="Train on the tasks of this split (e.g. train): each task's reset arguments become a row. "
                   "[default: seeds; for an Open Reward Standard server its train split]")
@click.option("--protocol", type=click.Choice(["auto", "envkit", "ors"]), default=None,
              help="What the --env-url servers speak: envkit's WebSocket protocol, or the Open Reward Standard "
                   "(an openreward-SDK server). [default: auto, found out from each server]")
@click.option("--seed", type=int, default=None, help="[default: 0]")
@click.option("--eval-games", type=int, default=None,
              help="Before and after training, play this many games of each environment's test split greedily "
                   "(as `envkit eval` does) and print both rows. [default: 0, none]")
@click.option("--transcripts-per-step", type=int, default=None,
              help="Episodes written to OUTPUT_DIR/transcripts.jsonl at each logging step. [default: 4]")
@click.option("--report-to", type=click.Choice(["none", "trackio"]), default=None,
              help="Also log metrics to trackio. [default: none]")
@click.option("--reconnect-timeout", type=float, default=None,
              help="Seconds to wait for an unreachable environment server before stopping. [default: 30]")
@click.option("--json", "as_json", is_flag=True, help="Print the closing summary as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="No per-step lines or progress bar; only the summary.")
@api_key_option
def command(config_path: str | None, as_json: bool, quiet: bool, **flags: Any) -> None:
    """Train a model with TRL's GRPO on one or more environments, served here or reached by URL.

    Tools are bound from the server's tool listing: no wrapper class to write. With no flags it
    trains a tiny model on the echo environment on CPU, offline, in about a minute.

    \b
    Examples:
      envkit train
      envkit train --env echo --env-url http://127.0.0.1:8001 --model ./my-model
      envkit train --env wordle --model Qwen/Qwen3-1.7B --vllm-mode colocate \\
          --num-generations 16
      envkit train --env wordle --env catch --reward env --reward wordle.win=0.5
      envkit train --env wordle --eval-games 30
      envkit train --env wordle --split train
      envkit train --env-url http://127.0.0.1:8080 --protocol ors  # openreward
      envkit train --config train.yaml --max-steps 100
    """
    from ..train.settings import settings_from

    settings = settings_from(config_path, flags)
    from ..train.runner import TrainingStopped, run
    from ..play.schema import BindingError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    say = (lambda message: None) if quiet else (lambda message: click.echo(message, err=True))
    try:   # other envkit errors are the command line's to report (envkit.cli.main)
        summary = run(settings, say=say, show_steps=not quiet)
    except BindingError as error:   # the served environment's tools cannot be bound: not a usage error
        raise click.ClickException(str(error)) from None
    except TrainingStopped as error:
        _print(error.summary, as_json)
        raise click.ClickException(str(error)) from None
    _print(summary, as_json)


def _print(summary: Any, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(summary), indent=2, default=str))
    else:
        click.echo(summary.table())
