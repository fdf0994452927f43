"""One training run: serve or reach the environments, bind them, build the data and rewards, train, report.

    from envkit.train.runner import run
    from envkit.train.settings import TrainSettings
    summary = run(TrainSettings(env=["echo"], model="tiny", max_steps=5))

The model is checked first (`model_check.check_model`), before anything is served or built: a model
that is nowhere raises `ConfigurationError`. If the environment servers stay unreachable past
`reconnect_timeout` the run stops with `TrainingStopped`; the metrics, plot and summary of the
steps done are still written.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..client import EnvClient
from ..client.ors_client import OrsServer, is_ors_server
from ..environment import Environment
from ..errors import ConfigurationError, EnvConnectionError, EnvkitError, SessionLostError
from ..play.binding import ServedEnvironment, Tally, bind, free_sessions, tool_names
from ..play.embedded import serve_envs
from ..play.model_check import check_model
from ..play.models import PLAY_SETTINGS_FILE, SEED_EPISODES
from ..play.tasks import TEST_SPLIT, TRAIN_SPLIT, file_rows, server_tasks, task_prompt, train_tasks, training_rows
from .ors_binding import OrsServedEnvironment, bind_ors
from .rewards import parse_reward, reward_functions, train_rewards
from .settings import TrainSettings
from .vllm_setup import check_vllm, prepare_vllm, sync_by_reload

__all__ = ["run", "Run", "TrainingStopped", "save_play_settings", "training_data"]

logger = logging.getLogger("envkit.train")


class TrainingStopped(EnvkitError):
    """The run could not go on (environment servers unreachable); `summary` holds what was done."""

    def __init__(self, message: str, summary: Any) -> None:
        super().__init__(message)
        self.summary = summary


@dataclass
class Run:
    """A prepared run: the bound environments, rows, rewards and trainer, ready to `train()`.

    `sampler` writes the transcripts of training episodes; `evaluation` plays `--eval-games` before and after;
    `agents` runs the rollouts of `--agent` (`agent_rollouts.AgentRollouts`), None otherwise.
    """

    settings: TrainSettings
    classes: dict[str, type[ServedEnvironment]]
    rows: list[dict[str, Any]]
    tally: Tally
    trainer: Any
    report: Any
    sampler: Any
    evaluation: _Evaluation | None
    agents: Any = None


def run(settings: TrainSettings, *, say: Callable[[str], None] = print, show_steps: bool = True) -> Any:
    """Train as `settings` say; returns the `Summary`.

    `say` receives progress notes; `show_steps` prints a line per step and a progress bar (stderr).
    """
    settings = settings.resolved()
    if settings.vllm_mode != "none":  # before anything is loaded or served: what to install, if anything
        check_vllm(settings.vllm_mode)
    check_model(settings.model)
    claimed = settings.claim_output_dir()
    with ExitStack() as stack:
        urls, players = _environment_urls(claimed, stack, say)
        if claimed.output_dir != settings.output_dir:   # said once the environments are there to train on
            say(f"{settings.output_dir}/ holds an earlier run: this one goes to {claimed.output_dir}/ "
                "(--overwrite replaces it instead)")
        settings = claimed
        prepared = prepare(settings, urls, say, show_steps=show_steps, players=players)
        return train(prepared)


def _environment_urls(settings: TrainSettings, stack: ExitStack, say: Callable[[str], None]
                      ) -> tuple[dict[str, str], dict[str, type[Environment]]]:
    """The servers to train against, and the classes of those served here (by name)."""
    sessions = max(settings.batch_size * settings.gradient_accumulation_steps, settings.eval_games)
    if settings.env_url:
        names = settings.env or [_server_name(url, _protocol(url, settings.protocol)) for url in settings.env_url]
        return dict(zip(names, settings.env_url, strict=True)), {}
    urls = stack.enter_context(serve_envs(settings.env, sessions))
    for name, url in urls.items():
        say(f"serving {name} on {url} (in this process)")
    return urls, {name: cls for name, cls in _env_classes(settings.env).items() if name in urls}


def _protocol(url: str, chosen: str) -> str:
    """`envkit` or `ors` for the server at `url`: as `chosen`, or found out (envkit's `/metadata`, else ORS's
    `/list_environments`). An envkit server speaks both; its own protocol is preferred."""
    if chosen != "auto":
        return chosen
    try:
        EnvClient(url).sync().metadata()
        return "envkit"
    except EnvkitError:
        if is_ors_server(url):
            return "ors"
        raise


def _server_name(url: str, protocol: str) -> str:
    if protocol == "ors":
        return OrsServer(url).env_name
    return str(EnvClient(url).sync().metadata().get("name") or url)


def _bind(settings: TrainSettings, name: str, url: str) -> type[ServedEnvironment]:
    if _protocol(url, settings.protocol) == "ors":
        try:
            cls = bind_ors(url, name=name, split=settings.split, reconnect_timeout=settings.reconnect_timeout)
        except ValueError as error:
            raise ConfigurationError(str(error)) from None
        if cls.split == TEST_SPLIT and not settings.train_on_test:
            raise ConfigurationError(f"{name} at {url} has no {TRAIN_SPLIT} split, and its first, {TEST_SPLIT}, is "
                                     "what evaluation plays: name another with --split, or pass --train-on-test")
        return cls
    known = _env_classes(settings.env).get(name) if settings.env else None
    return bind(url, name=name, reconnect_timeout=settings.reconnect_timeout,
                task_prompt=known.task_prompt if known is not None else None)


def _tasks(settings: TrainSettings, classes: Mapping[str, type[ServedEnvironment]]
           ) -> dict[str, list[dict[str, Any]] | None]:
    """Each environment's reset arguments to train on: an ORS server's tasks of its split, the tasks of `--split`,
    else its `train` tasks; None for an environment with no train split (its rows carry seeds)."""
    tasks: dict[str, list[dict[str, Any]] | None] = {}
    for name, cls in classes.items():
        if issubclass(cls, OrsServedEnvironment):
            tasks[name] = [{"task_index": index} for index in range(cls.server.num_tasks(cls.split))]
        elif settings.split is not None:
            tasks[name] = server_tasks(name, cls.url, settings.split)
        else:
            tasks[name] = train_tasks(cls.url)
    return tasks


def training_data(settings: TrainSettings, classes: Mapping[str, type[ServedEnvironment]],
                  prompts: Mapping[str, str], say: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """The rows the run trains on (and the tiny model warms up on): `--dataset`, else the environments' tasks
    (`envkit.play.tasks.training_rows`)."""
    if settings.dataset:
        return file_rows(settings.dataset, prompts)
    tasks = _tasks(settings, classes)
    for name, listed in tasks.items():
        if listed is not None and not issubclass(classes[name], OrsServedEnvironment):
            say(f"training on {name}'s {settings.split or TRAIN_SPLIT} split ({len(listed)} tasks)")
    return training_rows(prompts, tasks, settings.num_episodes, settings.seed, SEED_EPISODES)


def prepare(settings: TrainSettings, urls: Mapping[str, str], say: Callable[[str], None] = print, *,
            show_steps: bool = True, players: Mapping[str, type[Environment]] | None = None) -> Run:
    """Bind the environments at `urls` and build everything the trainer needs (settings must be resolved).

    `players`: the classes of environments served in this process, by name; the tiny model warms up
    on whole episodes of those with a scripted player. The turn and token budgets not set are fitted
    to the episode length the environments declare (`TrainSettings.fitted`).
    """
    vllm_device = prepare_vllm(settings, say) if settings.vllm_mode != "none" else None
    classes = {name: _bind(settings, name, url) for name, url in urls.items()}
    for name, cls in classes.items():
        tools = ", ".join(tool_names(cls))
        via = f" (Open Reward Standard, split {cls.split})" if issubclass(cls, OrsServedEnvironment) else ""
        say(f"bound {name}{via}: tools {tools}" + (f"; reward components {', '.join(cls.component_names)}"
                                                   if cls.component_names else ""))
    _check_capacity({name: url for name, url in urls.items() if not issubclass(classes[name], OrsServedEnvironment)},
                    settings.batch_size * settings.gradient_accumulation_steps)
    evaluation = _Evaluation(settings, urls, say) if settings.eval_games else None
    prompts = {name: task_prompt(name, cls.metadata) for name, cls in classes.items()}
    rows = training_data(settings, classes, prompts, say)
    dataset = _table(rows)
    from .samples import EpisodeSampler

    sampler = EpisodeSampler(Path(settings.output_dir) / "transcripts.jsonl", settings.model,
                             settings.transcripts_per_step)
    choices = [parse_reward(text) for text in settings.reward]
    if not choices:
        choices = train_rewards(classes)
        declared = [choice for choice in choices if choice.kind != "env"]
        if declared:
            say("training reward (declared by the environment; --reward to choose another): "
                + ", ".join(f"{choice.env}.{choice.name}" + (f"={choice.weight:g}" if choice.weight != 1 else "")
                            for choice in declared))
    functions, weights = reward_functions(choices, classes, sampler.observe) if not settings.agent else ([], None)
    import torch

    on_gpu = torch.cuda.is_available()
    model, tokenizer, episode_tokens = _model(settings, classes, rows, on_gpu, say, players or {})
    episode_length = _episode_length(classes)
    settings = settings.fitted(episode_length, episode_tokens)
    if evaluation is not None:  # it plays with the episode budget training uses
        evaluation.settings = settings
    say(f"episode budget: {settings.max_tool_calling_iterations} tool-calling turns, "
        f"{settings.max_completion_length} tokens" + (f" (episodes take {episode_length} tool calls)"
                                                      if episode_length else "")
        + f"; {settings.max_steps} steps at learning rate {settings.learning_rate:g}")
    tally = Tally()  # counts training episodes only, not the tiny model's scripted warm-up ones
    for cls in classes.values():
        cls.tally = tally
    config = settings.grpo_config(on_gpu=on_gpu)
    config.reward_weights = weights
    agents = None

    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from .report import RunReport
    from .rollouts import GRPOTrainer  # TRL's, with a batch's environment calls overlapping

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is experimental in TRL 1.16; known
    factory: Any = classes if len(classes) > 1 else next(iter(classes.values()))
    with _quiet_unscorable_warning():
        if settings.agent:   # every rollout an agent in its environment's sandbox, its model calls captured
            from .agent_trainer import agent_trainer

            trainer, agents = agent_trainer(settings, players or {}, model, tokenizer, config, dataset, tally)
            functions = list(trainer.reward_funcs)
        else:
            trainer = GRPOTrainer(model=model, reward_funcs=functions, args=config, train_dataset=dataset,
                                  processing_class=tokenizer, environment_factory=factory)
    if vllm_device == "cpu":
        sync_by_reload(trainer, say)
    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)
    report = RunReport(Path(settings.output_dir), tally, settings.max_steps, [f.__name__ for f in functions],
                       show=show_steps, budget=(settings.max_tool_calling_iterations, settings.max_completion_length),
                       episode_length=episode_length)
    trainer.add_callback(report)
    if settings.transcripts_per_step:
        trainer.add_callback(sampler)
    return Run(settings, classes, rows, tally, trainer, report, sampler, evaluation, agents)


def train(prepared: Run) -> Any:
    """Run the prepared trainer; close every session; save the model; write the report."""
    settings, trainer = prepared.settings, prepared.trainer
    stopped = None
    evaluation = prepared.evaluation
    if evaluation is not None:
        evaluation.run(trainer, "before training")
    try:
        with _quiet_unscorable_warning():
            trainer.train()
    except (EnvConnectionError, SessionLostError) as error:
        stopped = (f"the environment server stopped answering ({error}); the model and metrics of the steps done are "
                   "saved. Restart the server (or raise --reconnect-timeout to wait longer) and run again")
    finally:
        for cls in prepared.classes.values():
            cls._close_all()
        if prepared.agents is not None:
            prepared.agents.close()
    output = Path(settings.output_dir)
    summary = prepared.report.finish(stopped)
    if settings.save_model:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
        trainer.save_model(str(output / "model"))
        save_play_settings(output / "model", settings)
        summary.files = {"model": str(output / "model"), **summary.files}
    if prepared.sampler.written:
        summary.files["transcripts"] = str(prepared.sampler.path)
    if prepared.agents is not None:
        summary.files["traces"] = str(prepared.agents.traces_path)
    if evaluation is not None:
        if stopped is None:
            evaluation.run(trainer, "after training")
        summary.evaluation = evaluation.rows
        summary.files["eval transcripts"] = str(evaluation.write())
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


def _check_capacity(urls: Mapping[str, str], sessions: int) -> None:
    """Each rollout of a generation batch holds a session; refuse a server that cannot hold them all."""
    for name, url in urls.items():
        free = free_sessions(url, sessions)
        if free < sessions:
            raise EnvConnectionError(url, f"{name} has room for {free} more sessions but each generation batch plays "
                                     f"{sessions} episodes at once; start the server with --max-concurrent-envs "
                                     f"{sessions} or more, or lower --batch-size")


def _episode_length(classes: Mapping[str, type[ServedEnvironment]]) -> int | None:
    """The longest episode (in tool calls) the bound environments declare in `/metadata`, or None."""
    lengths = [length for cls in classes.values() if isinstance(length := cls.metadata.get("episode_length"), int)
               and not isinstance(length, bool) and length > 0]
    return max(lengths) if lengths else None


def _warm_up_warning(name: str, env_class: type[Environment]) -> str | None:
    """What to do when the tiny model warmed up on `name` with random calls only (no scripted solver to copy)."""
    from ..play.policy_player import players_place, tool_players

    has_solver = "solver" in tool_players(env_class)
    if has_solver and env_class.EPISODE_LENGTH:
        return None
    fix = (f"declare EPISODE_LENGTH on {env_class.__name__} (the tool calls a played-out episode takes)" if has_solver
           else f'offer a scripted player as TOOL_PLAYERS = {{"solver": ...}} in {players_place(env_class)} '
                "(docs/evaluation.md#scripted-players)")
    return (f"warning: the tiny model warmed up on {name} with random tool calls only, and none earned a reward: "
            f"training would likely score every episode the same and learn nothing; {fix}, or train a model that "
            "already calls tools (--model)")


def _model(settings: TrainSettings, classes: Mapping[str, type[ServedEnvironment]], rows: list[dict[str, Any]],
           on_gpu: bool, say: Callable[[str], None], players: Mapping[str, type[Environment]]
           ) -> tuple[Any, Any, int | None]:
    """The policy, its tokenizer and (tiny model) its longest warm-up episode in tokens: the tiny model built
    here, or a local path / Hub id for TRL to load."""
    if not settings.tiny:
        return settings.model, None, None
    from ..play.tiny import GPU_SPEC, TinyModelSpec, build_tiny_model, describe

    if not on_gpu:
        import torch

        torch.set_num_threads(1)  # a 100K-parameter model gains nothing from threads, and loses much to their overhead
    spec = replace(GPU_SPEC if settings.vllm_mode != "none" else TinyModelSpec(), seed=settings.seed)
    # vLLM loads the policy from disk, and so does TRL the reference model a KL term (beta > 0) needs
    on_disk = settings.vllm_mode != "none" or settings.beta > 0
    save_to = Path(settings.output_dir) / "tiny-model" if on_disk else None
    started = time.perf_counter()
    model, tokenizer, figures = build_tiny_model(classes, rows, spec, save_to=save_to, players=players)
    say(f"{describe(figures)} ({time.perf_counter() - started:.1f}s)")
    if not figures["warmup_rewarded_share"]:   # every warm-up episode scored 0: GRPO would have nothing to compare
        for name, env_class in players.items():
            warning = _warm_up_warning(name, env_class)
            if warning:
                say(warning)
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


#: Saved beside a trained model: how it played in training, so `envkit eval` plays it the same way.
def save_play_settings(folder: Path, settings: TrainSettings) -> None:
    """Write the episode budget and chat template arguments the model was trained with into its folder."""
    import json

    (folder / PLAY_SETTINGS_FILE).write_text(json.dumps({
        "max_completion_length": settings.max_completion_length,
        "max_tool_calling_iterations": settings.max_tool_calling_iterations,
        "chat_template_kwargs": settings.chat_kwargs(),
    }, indent=2) + "\n")


class _Evaluation:
    """`--eval-games N`: the first N test tasks of each environment, played greedily by the model being trained,
    through `envkit eval`'s loop and table, on sessions of their own (not counted in the training tally)."""

    def __init__(self, settings: TrainSettings, urls: Mapping[str, str], say: Callable[[str], None]) -> None:
        from ..play.games import split_games
        from ..play.binding import bind

        self.settings, self.say = settings, say
        env_classes = _env_classes(settings.env or list(urls))
        self.classes = {name: bind(url, name=name, task_prompt=env_classes[name].task_prompt if name in env_classes
                                   else None) for name, url in urls.items()}
        self.metrics: dict[str, Any] = {}
        self.games: list[Any] = []
        for name, cls in self.classes.items():
            if name not in env_classes:
                raise ConfigurationError(f"--eval-games reads the test tasks from the environment's class, but "
                                         f"{name!r} names no bundled env, env folder or module:Class here; name it "
                                         "with --env beside --env-url")
            self.metrics[name] = tuple(env_classes[name].METRICS)
            prompt = task_prompt(name, cls.metadata)
            self.games.extend(split_games(name, env_classes[name], TEST_SPLIT, settings.eval_games, prompt))
        _check_capacity(urls, settings.eval_games)
        self.rows: list[Any] = []
        self.transcripts: list[Any] = []

    def run(self, trainer: Any, when: str) -> None:
        """Play the games with the trainer's model as it is now; keep the rows and transcripts."""
        from ..play.model_player import ModelPlayer
        from ..play.games import play_and_score

        settings = self.settings
        label = f"{settings.model} ({when})"
        self.say(f"evaluating {label}: {len(self.games)} test games")
        model = trainer.model
        training = model.training
        model.eval()
        player = ModelPlayer(label, model, trainer.processing_class,
                             max_completion_length=settings.max_completion_length,
                             chat_template_kwargs=settings.chat_kwargs())
        try:
            rows, transcripts = play_and_score(player, self.games, self.classes, self.metrics,
                                               max_tool_calling_iterations=settings.max_tool_calling_iterations)
        finally:
            model.train(training)
        self.rows.extend(rows)
        self.transcripts.extend(transcripts)

    def write(self) -> Path:
        from ..transcripts import write_transcripts

        return write_transcripts(Path(self.settings.output_dir) / "eval_transcripts.jsonl", self.transcripts)


def _env_classes(targets: list[str]) -> dict[str, Any]:
    """Environment classes by name (and by target as given) for the targets that resolve here."""
    from ..app.targets import resolve_target

    found: dict[str, Any] = {}
    for target in targets:
        try:
            resolved = resolve_target(target)
        except ConfigurationError:
            continue
        found[resolved.name] = found[target] = resolved.env_class
    return found
