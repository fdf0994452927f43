"""`envkit train`: GRPO (TRL) against served environments, with no wrapper code to write."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import click

from ..play.models import SEED_EPISODES, TINY
from ..train.settings import DEFAULT_OUTPUT_DIR, PROTOCOLS, REPORT_TO, VLLM_MODES, TrainSettings
from .options import api_key_option, by_game, by_model, default_of, env_options, episode_options


def _default(name: str) -> Any:
    return default_of(TrainSettings, name)



@click.command("train")
@env_options(f"Repeat to train on several (rows are routed per environment). [default: {_default('env')[0]}]",
             "Train against a running server instead of serving --env in this process.")
@click.option("--model", default=None, metavar="MODEL",
              help=f"'{TINY}' (a model of 100-200K parameters built here, offline, in seconds), a local path, or a "
                   f"Hub id. [default: {_default('model')}]")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="YAML file of settings (same names as these flags, plus a 'grpo:' table of GRPOConfig fields), or "
                   "a shipped recipe's name: wordle-grpo (TRL's Wordle guide).")
@click.option("--output-dir", default=None,
              help=f"Where the model, metrics and plot go. [default: {DEFAULT_OUTPUT_DIR}, or {DEFAULT_OUTPUT_DIR}-2, "
                   "-3, ... when it holds an earlier run]")
@click.option("--overwrite", is_flag=True, default=None,
              help="Replace an earlier run's files in --output-dir (without it, a named folder that holds a run is "
                   "refused).")
@click.option("--max-steps", type=int, default=None,
              help=f"Training steps. [default: {by_game('max_steps')}]")
@click.option("--learning-rate", type=float, default=None, help=f"[default: {by_game('learning_rate')}]")
@click.option("--num-generations", type=int, default=None,
              help=f"Episodes per prompt, compared by GRPO. [default: {by_model('num_generations')}]")
@click.option("--batch-size", type=int, default=None,
              help=f"Episodes per device per step (a multiple of --num-generations). [default: "
                   f"{by_model('batch_size')}]")
@click.option("--gradient-accumulation-steps", type=int, default=None,
              help=f"[default: {_default('gradient_accumulation_steps')}]")
@episode_options()
@click.option("--temperature", type=float, default=None,
              help=f"Sampling temperature. [default: {_default('temperature')}]")
@click.option("--beta", type=float, default=None,
              help=f"KL coefficient (0: no reference model). [default: {_default('beta'):g}]")
@click.option("--vllm-mode", type=click.Choice(VLLM_MODES), default=None,
              help="Generate with vLLM (a GPU, or vLLM's CPU build): in the training process (colocate) or a "
                   "`trl vllm-serve` server (GPU only). "
                   f"[default: {_default('vllm_mode')}]")
@click.option("--vllm-gpu-memory-utilization", type=float, default=None,
              help=f"Share of GPU memory vLLM may take in colocate mode. [default: "
                   f"{_default('vllm_gpu_memory_utilization')}]")
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
              help=f"Without --dataset: how many episodes (rows) the environments provide. [default: every task of "
                   f"the split once; {SEED_EPISODES} seeds for an environment without tasks]")
@click.option("--split", default=None, metavar="NAME",
              help="Train on the tasks of this split: each task's reset arguments become a row. [default: train, "
                   "for each environment that declares it; seeds for one without tasks]")
@click.option("--train-on-test", is_flag=True, default=None,
              help="Allow --split test (the games envkit eval and --eval-games score), refused without it.")
@click.option("--protocol", type=click.Choice(PROTOCOLS), default=None,
              help=f"What the --env-url servers speak: envkit's WebSocket protocol, or the Open Reward Standard "
                   f"(an openreward-SDK server). [default: {_default('protocol')}, found out from each server]")
@click.option("--seed", type=int, default=None, help=f"[default: {_default('seed')}]")
@click.option("--eval-games", type=int, default=None,
              help="Before and after training, play this many games of each environment's test split greedily "
                   f"(as `envkit eval` does) and print both rows. [default: {_default('eval_games')}, none]")
@click.option("--transcripts-per-step", type=int, default=None,
              help=f"Episodes written to OUTPUT_DIR/transcripts.jsonl at each logging step. [default: "
                   f"{_default('transcripts_per_step')}]")
@click.option("--report-to", type=click.Choice(REPORT_TO), default=None,
              help=f"Also log metrics to trackio. [default: {_default('report_to')}]")
@click.option("--reconnect-timeout", type=float, default=None,
              help=f"Seconds to wait for an unreachable environment server before stopping. [default: "
                   f"{_default('reconnect_timeout'):g}]")
@click.option("--agent", default=None, metavar="CMD|reference",
              help="Train a loop-owning agent: each rollout runs 'reference' (the bundled agent) or your shell "
                   "command in its environment's sandbox, its model calls captured by a proxy serving the model "
                   "being trained; GRPO trains on the captured tokens (OUTPUT_DIR/traces.jsonl).")
@click.option("--agent-timeout", type=float, default=None, metavar="SECONDS",
              help=f"Time limit of each agent run. [default: {_default('agent_timeout'):g}]")
@click.option("--rollout-reward", default=None, metavar="MODULE:FUNCTION",
              help="With --agent: score each rollout with your function of its outcome (TRL's HarnessRolloutOutcome "
                   "fields); None drops the rollout. [default: the environment's verifier]")
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
      envkit train --env wordle --split test --train-on-test
      envkit train --env-url http://127.0.0.1:8080 --protocol ors  # openreward
      envkit train --config train.yaml --max-steps 100
      envkit train --env coding --agent reference --max-steps 2
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
