"""One training run: serve or reach the environments, bind them, build the data and rewards, train, report.

    from envkit.train.runner import run
    from envkit.train.settings import TrainSettings
    summary = run(TrainSettings(env=["echo"], model="tiny", max_steps=5))

The model is located first (`models.locate_model`), before anything is served or built: a model
that is nowhere raises `ModelNotFoundError`. If the environment servers stay unreachable past
`reconnect_timeout` the run stops with `TrainingStopped`; the metrics, plot and summary of the
steps done are still written.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..client import EnvClient
from ..environment import Environment
from ..errors import ConfigurationError, EnvConnectionError, EnvkitError, SessionLostError
from .binding import ServedEnvironment, Tally, bind, tool_names
from .data import env_rows, file_rows, task_prompt
from .embedded import serve_envs
from .models import locate_model
from .rewards import parse_reward, reward_functions
from .settings import TrainSettings

__all__ = ["run", "Run", "TrainingStopped"]

logger = logging.getLogger("envkit.train")


class TrainingStopped(EnvkitError):
    """The run could not go on (environment servers unreachable); `summary` holds what was done."""

    def __init__(self, message: str, summary: Any) -> None:
        super().__init__(message)
        self.summary = summary


@dataclass
class Run:
    """A prepared run: the bound environments, rows, rewards and trainer, ready to `train()`."""

    settings: TrainSettings
    classes: dict[str, type[ServedEnvironment]]
    rows: list[dict[str, Any]]
    tally: Tally
    trainer: Any
    report: Any


def run(settings: TrainSettings, *, say: Callable[[str], None] = print, show_steps: bool = True) -> Any:
    """Train as `settings` say; returns the `Summary`.

    `say` receives progress notes; `show_steps` prints a line per step and a progress bar (stderr).
    """
    settings = settings.resolved()
    source = locate_model(settings.model)
    claimed = settings.claim_output_dir()
    if claimed.output_dir != settings.output_dir:
        say(f"{settings.output_dir}/ holds an earlier run: this one goes to {claimed.output_dir}/ "
            "(--overwrite replaces it instead)")
    settings = claimed
    if source.kind != "tiny":
        say(f"model {settings.model}: " + {"folder": "local folder", "cache": f"in the Hugging Face cache ({source.path})",
                                          "hub": "on the Hugging Face Hub (downloaded on first use)"}[source.kind])
    with ExitStack() as stack:
        urls, players = _environment_urls(settings, stack, say)
        prepared = prepare(settings, urls, say, show_steps=show_steps, players=players)
        return train(prepared)


def _environment_urls(settings: TrainSettings, stack: ExitStack, say: Callable[[str], None]
                      ) -> tuple[dict[str, str], dict[str, type[Environment]]]:
    """The servers to train against, and the classes of those served here (by name)."""
    sessions = settings.batch_size * settings.gradient_accumulation_steps
    if settings.env_url:
        names = settings.env or [_server_name(url) for url in settings.env_url]
        return dict(zip(names, settings.env_url, strict=True)), {}
    served = stack.enter_context(serve_envs(settings.env, sessions))
    for name, (url, _) in served.items():
        say(f"serving {name} on {url} (in this process)")
    return {name: url for name, (url, _) in served.items()}, {name: cls for name, (_, cls) in served.items()}


def _server_name(url: str) -> str:
    return str(EnvClient(url).sync().metadata().get("name") or url)


def prepare(settings: TrainSettings, urls: Mapping[str, str], say: Callable[[str], None] = print, *,
            show_steps: bool = True, players: Mapping[str, type[Environment]] | None = None) -> Run:
    """Bind the environments at `urls` and build everything the trainer needs (settings must be resolved).

    `players`: the classes of environments served in this process, by name; the tiny model warms up
    on whole episodes of those with a scripted player. The turn and token budgets not set are fitted
    to the episode length the environments declare (`TrainSettings.fitted`).
    """
    _check_vllm(settings)
    classes = {name: bind(url, name=name, reconnect_timeout=settings.reconnect_timeout) for name, url in urls.items()}
    for name, cls in classes.items():
        tools = ", ".join(tool_names(cls))
        say(f"bound {name}: tools {tools}" + (f"; reward components {', '.join(cls.component_names)}"
                                              if cls.component_names else ""))
    _check_capacity(urls, settings.batch_size * settings.gradient_accumulation_steps)
    prompts = {name: task_prompt(name, cls.metadata) for name, cls in classes.items()}
    rows = (file_rows(settings.dataset, prompts) if settings.dataset
            else env_rows(prompts, settings.num_episodes, settings.seed))
    dataset = _table(rows)
    functions, weights = reward_functions([parse_reward(text) for text in settings.reward], classes)
    import torch

    on_gpu = torch.cuda.is_available()
    model, tokenizer, episode_tokens = _model(settings, classes, rows, on_gpu, say, players or {})
    episode_length = _episode_length(classes)
    settings = settings.fitted(episode_length, episode_tokens)
    say(f"episode budget: {settings.max_tool_calling_iterations} tool-calling turns, "
        f"{settings.max_completion_length} tokens" + (f" (episodes take {episode_length} tool calls)"
                                                      if episode_length else "")
        + f"; {settings.max_steps} steps at learning rate {settings.learning_rate:g}")
    tally = Tally()  # counts training episodes only, not the tiny model's scripted warm-up ones
    for cls in classes.values():
        cls.tally = tally
    config = settings.grpo_config(on_gpu=on_gpu)
    config.reward_weights = weights

    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOTrainer

    from .report import RunReport

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is experimental in TRL 1.16; known
    factory: Any = classes if len(classes) > 1 else next(iter(classes.values()))
    with _quiet_unscorable_warning():
        trainer = GRPOTrainer(model=model, reward_funcs=functions, args=config, train_dataset=dataset,
                              processing_class=tokenizer, environment_factory=factory)
    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)
    report = RunReport(Path(settings.output_dir), tally, settings.max_steps, [f.__name__ for f in functions],
                       show=show_steps, budget=(settings.max_tool_calling_iterations, settings.max_completion_length),
                       episode_length=episode_length)
    trainer.add_callback(report)
    return Run(settings, classes, rows, tally, trainer, report)


def train(prepared: Run) -> Any:
    """Run the prepared trainer; close every session; save the model; write the report."""
    settings, trainer = prepared.settings, prepared.trainer
    stopped = None
    try:
        with _quiet_unscorable_warning():
            trainer.train()
    except (EnvConnectionError, SessionLostError) as error:
        stopped = (f"the environment server stopped answering ({error}); the model and metrics of the steps done are "
                   "saved. Restart the server (or raise --reconnect-timeout to wait longer) and run again")
    finally:
        for cls in prepared.classes.values():
            cls._close_all()
    output = Path(settings.output_dir)
    summary = prepared.report.finish(stopped)
    if settings.save_model:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
        trainer.save_model(str(output / "model"))
        summary.files = {"model": str(output / "model"), **summary.files}
    if stopped is not None:
        raise TrainingStopped(stopped, summary)
    return summary


def _table(rows: list[dict[str, Any]]) -> Any:
    """The rows as a `datasets.Dataset`; a column some rows lack is None there (and not passed to `reset`)."""
    from datasets import Dataset

    columns = list(dict.fromkeys(key for row in rows for key in row))
    try:
        return Dataset.from_list([{column: row.get(column) for column in columns} for row in rows])
    except (TypeError, ValueError) as error:  # pyarrow's errors derive from these
        raise ConfigurationError(f"the dataset's rows do not make a table ({error}); give each column one type "
                                 "in every row") from None


def _check_vllm(settings: TrainSettings) -> None:
    """vLLM generates on NVIDIA GPUs only; say so before anything is built."""
    if settings.vllm_mode == "none":
        return
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        raise ConfigurationError(f"--vllm-mode {settings.vllm_mode} needs an NVIDIA GPU (vLLM has no CPU build); "
                                 "leave it out to generate with transformers on CPU")
    if importlib.util.find_spec("vllm") is None:
        raise ConfigurationError(f"--vllm-mode {settings.vllm_mode} needs vLLM: pip install 'envkit[gpu]'")


def _check_capacity(urls: Mapping[str, str], sessions: int) -> None:
    """Each rollout of a generation batch holds a session; refuse a server that cannot hold them all."""
    for name, url in urls.items():
        health = EnvClient(url).sync().health()
        free = int(health.get("max_sessions", sessions)) - int(health.get("active_sessions", 0))
        if free < sessions:
            raise EnvConnectionError(url, f"{name} has room for {free} more sessions but each generation batch plays "
                                     f"{sessions} episodes at once; start the server with --max-concurrent-envs "
                                     f"{sessions} or more, or lower --batch-size")


def _episode_length(classes: Mapping[str, type[ServedEnvironment]]) -> int | None:
    """The longest episode (in tool calls) the bound environments declare in `/metadata`, or None."""
    lengths = [length for cls in classes.values() if isinstance(length := cls.metadata.get("episode_length"), int)
               and not isinstance(length, bool) and length > 0]
    return max(lengths) if lengths else None


def _model(settings: TrainSettings, classes: Mapping[str, type[ServedEnvironment]], rows: list[dict[str, Any]],
           on_gpu: bool, say: Callable[[str], None], players: Mapping[str, type[Environment]]
           ) -> tuple[Any, Any, int | None]:
    """The policy, its tokenizer and (tiny model) its longest warm-up episode in tokens: the tiny model built
    here, or a local path / Hub id for TRL to load."""
    if not settings.tiny:
        return settings.model, None, None
    from .tiny import GPU_SPEC, TinyModelSpec, build_tiny_model, describe

    if not on_gpu:
        import torch

        torch.set_num_threads(1)  # a 100K-parameter model gains nothing from threads, and loses much to their overhead
    spec = GPU_SPEC if settings.vllm_mode != "none" else TinyModelSpec(seed=settings.seed)
    # vLLM loads the policy from disk, and so does TRL the reference model a KL term (beta > 0) needs
    on_disk = settings.vllm_mode != "none" or settings.beta > 0
    save_to = Path(settings.output_dir) / "tiny-model" if on_disk else None
    started = time.perf_counter()
    model, tokenizer, figures = build_tiny_model(classes, rows, spec, save_to=save_to, players=players)
    say(f"{describe(figures)} ({time.perf_counter() - started:.1f}s)")
    episode_tokens = int(figures["episode_tokens"])
    if save_to is not None:
        return str(save_to), None, episode_tokens
    return model, tokenizer, episode_tokens


@contextmanager
def _quiet_unscorable_warning() -> Iterator[None]:
    """TRL warns, with the whole batch, whenever every reward is None for a row: here that means a lost
    episode, which envkit already reports in one line."""
    trl_logger = logging.getLogger("trl.trainer.grpo_trainer")

    def keep(record: logging.LogRecord) -> bool:
        return "All reward functions returned None" not in str(record.msg)

    trl_logger.addFilter(keep)
    try:
        yield
    finally:
        trl_logger.removeFilter(keep)
