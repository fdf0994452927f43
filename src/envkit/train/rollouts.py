"""A batch's episodes played together: TRL's `GRPOTrainer`, whose envkit environments wait for the server at once.

    from envkit.train.rollouts import GRPOTrainer        # in place of `from trl import GRPOTrainer`
    trainer = GRPOTrainer(model=..., environment_factory=environment_factory(url), reward_funcs=..., args=...)

TRL 1.16 resets a batch's environments one after another and runs the tool calls of one rollout after
the other's, so a slow environment costs one call per rollout per turn. This trainer plays a batch
through TRL's documented `rollout_func` hook instead: every rollout's `reset` at once, then each turn's
tool calls of all rollouts at once (one thread per rollout, each waiting on its own session; a
rollout's own calls stay in order), and generation through the trainer's own path (`transformers`,
or colocated vLLM), one batch a turn as TRL generates. The episodes are TRL's, token for token: the
same prompt rendering, tool-message tokens, turn and token budgets, dropped overlong tool results,
error messages and metrics (`tools/call_frequency`, `tools/failure_frequency`); reward functions get
the same `prompts` (with the first observation), `completions` (the episode's messages) and `environments`.

How TRL hands over the rows: TRL still draws the batch's instances and calls `reset(**row)` on each,
which here only keeps the row (it returns None, so TRL leaves the prompt as it is); the rollouts then
start all the episodes together. TRL's own tool loop is switched off (`trainer.tools = []` after
construction), since the rollouts have played every turn.

Only classes bound by envkit (`environment_factory`, `bind`) are played this way. The trainer checks
the TRL members it uses when it is built; where one is missing or different (another TRL), it says so
once in the log and trains exactly as TRL's `GRPOTrainer` does.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trl import GRPOTrainer as TRLGRPOTrainer

from ..play.binding import ServedEnvironment
from ..play.loop import Game, start, take_turns
from ..play.model_player import TokenPlayer

__all__ = ["GRPOTrainer", "play_rollouts", "trl_parts_missing", "log_tool_metrics", "EPISODE_PROMPTS", "EPISODE_MESSAGES"]

logger = logging.getLogger("envkit.train")

#: The extra fields the rollouts hand the reward functions: each episode's prompt (with the first observation, as
#: TRL's loop passes it) and its messages after the prompt.
EPISODE_PROMPTS, EPISODE_MESSAGES = "envkit_episode_prompts", "envkit_episode_messages"
#: `GRPOTrainer._generate_single_turn`'s parameters as TRL 1.16 declares them.
GENERATE_PARAMETERS = ("prompt_ids", "images", "multimodal_fields", "num_generations")
#: What the rollouts read on a built trainer.
TRAINER_ATTRIBUTES = ("environments", "tools", "chat_template", "chat_template_kwargs", "max_completion_length",
                      "max_tool_calling_iterations", "num_generations", "num_generations_eval", "use_vllm",
                      "processing_class", "accelerator", "_metrics", "reward_funcs", "_is_vlm")


def trl_parts_missing(trainer: Any = None) -> list[str]:
    """The TRL members the rollouts rely on that this TRL lacks (of the class, and of `trainer` when given)."""
    missing = []
    if "rollout_func" not in inspect.signature(TRLGRPOTrainer.__init__).parameters:
        missing.append("GRPOTrainer(rollout_func=...)")
    generate = getattr(TRLGRPOTrainer, "_generate_single_turn", None)
    if generate is None or tuple(inspect.signature(generate).parameters)[1:5] != GENERATE_PARAMETERS:
        missing.append(f"GRPOTrainer._generate_single_turn({', '.join(GENERATE_PARAMETERS)})")
    if trainer is not None:
        missing += [f"GRPOTrainer.{name}" for name in TRAINER_ATTRIBUTES if not hasattr(trainer, name)]
    return missing


class GRPOTrainer(TRLGRPOTrainer):
    """TRL's `GRPOTrainer`; with an envkit `environment_factory`, a batch's environment calls overlap.

    Takes exactly TRL's arguments. With a `rollout_func` of your own, or environment classes not bound by
    envkit, it is TRL's trainer unchanged.
    """

    def __init__(self, *args: Any, environment_factory: Any = None, rollout_func: Any = None, **kwargs: Any) -> None:
        together = rollout_func is None and _bound_by_envkit(environment_factory)
        missing = trl_parts_missing() if together else []
        deferring = _Deferring.wrap(environment_factory) if together and not missing else None
        super().__init__(*args, environment_factory=deferring.factory if deferring else environment_factory,
                         rollout_func=play_rollouts if deferring else rollout_func, **kwargs)
        if deferring is None:
            if missing:
                _step_aside(f"this TRL lacks {', '.join(missing)}")
            return
        missing = trl_parts_missing(self)
        if missing or self._is_vlm:
            deferring.stop()
            self.rollout_func = None
            _step_aside(f"this TRL lacks {', '.join(missing)}" if missing else "the model takes images, which the "
                        "rollouts do not pass on")
            return
        self.tools = []   # TRL's own tool loop stays off: the rollouts have played every turn
        self.reward_funcs = [_reading_episode_messages(function) if _plain_function(function) else function
                             for function in self.reward_funcs]


def _step_aside(why: str) -> None:
    logger.warning("envkit: %s; a batch's environment calls run one after another, as TRL makes them", why)


def _bound_by_envkit(factory: Any) -> bool:
    factories = list(factory.values()) if isinstance(factory, Mapping) else [factory]
    return bool(factories) and all(isinstance(item, type) and issubclass(item, ServedEnvironment)
                                   for item in factories)


class _Deferring:
    """Environment factories whose instances keep `reset`'s row for the rollouts, as long as it is on."""

    def __init__(self) -> None:
        self.instances: list[ServedEnvironment] = []
        self.on = True
        self.factory: Any = None

    @classmethod
    def wrap(cls, factory: Any) -> _Deferring:
        deferring = cls()
        if isinstance(factory, Mapping):
            deferring.factory = {name: deferring._maker(item) for name, item in factory.items()}
        else:
            deferring.factory = deferring._maker(factory)
        return deferring

    def _maker(self, cls: type[ServedEnvironment]) -> Callable[[], ServedEnvironment]:
        def make() -> ServedEnvironment:
            instance = cls()
            instance._batched = self.on
            self.instances.append(instance)
            return instance

        return make

    def stop(self) -> None:
        """Instances made so far and from now on reset when TRL says so."""
        self.on = False
        for instance in self.instances:
            instance._batched = False


def _plain_function(function: Any) -> bool:
    import torch

    return callable(function) and not isinstance(function, torch.nn.Module)


def _reading_episode_messages(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, given what TRL's own loop passes it: each episode's prompt with the first observation as
    `prompts`, and its messages as `completions` (not TRL's parse of the whole episode as one answer)."""

    def swapped(kwargs: dict[str, Any]) -> dict[str, Any]:
        prompts, messages = kwargs.pop(EPISODE_PROMPTS, None), kwargs.pop(EPISODE_MESSAGES, None)
        return {**kwargs, "prompts": prompts, "completions": messages} if messages is not None else kwargs

    if inspect.iscoroutinefunction(function):
        async def reward_async(*args: Any, **kwargs: Any) -> Any:
            return await function(*args, **swapped(kwargs))

        wrapped: Callable[..., Any] = reward_async
    else:
        def reward(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **swapped(kwargs))

        wrapped = reward
    return functools.wraps(function)(wrapped)


class TrainerPlayer(TokenPlayer):
    """Generates with the trainer's own generation path, as TRL's tool loop does: the batch's first turn with
    the trainer's `num_generations`, later turns one completion per conversation."""

    def __init__(self, trainer: Any, generations: int) -> None:
        super().__init__("policy", trainer.processing_class, chat_template=trainer.chat_template,
                         chat_template_kwargs=trainer.chat_template_kwargs,
                         max_completion_length=trainer.max_completion_length,
                         max_model_length=_max_model_length(trainer))
        self.trainer = trainer
        self.generations = generations

    def _generate(self, batch: list[list[int]], max_new_tokens: int
                  ) -> tuple[list[list[int]], list[list[float]] | None]:
        generations, self.generations = self.generations, 1
        ids, logprobs = self.trainer._generate_single_turn(batch, None, {}, generations)
        return [list(row) for row in ids], logprobs


def _max_model_length(trainer: Any) -> int:
    """The longest sequence the generator takes (TRL drops tool results that would reach it)."""
    if trainer.use_vllm and getattr(trainer, "vllm_mode", None) == "colocate":
        return int(trainer.vllm_generation.llm.llm_engine.model_config.max_model_len)
    return int(trainer.model.config.max_position_embeddings)


def play_rollouts(prompts: list[Any], trainer: Any) -> dict[str, Any]:
    """TRL's `rollout_func`: play the batch's episodes on `trainer.environments`, their environment calls overlapping.

    Returns TRL's fields (`prompt_ids`, `completion_ids`, `logprobs`, `env_mask`) and each episode's messages.
    """
    environments: list[ServedEnvironment] = list(trainer.environments)
    mode = "train" if trainer.model.training else "eval"
    player = TrainerPlayer(trainer, trainer.num_generations if mode == "train" else trainer.num_generations_eval)
    games = [Game(type(environment).env_name, environment._row or {}, prompt)
             for environment, prompt in zip(environments, prompts, strict=True)]
    with ThreadPoolExecutor(max_workers=len(games), thread_name_prefix="envkit-rollout") as pool:
        started = time.perf_counter()
        conversations = start(games, environments, pool)
        resets = time.perf_counter() - started
        calls = take_turns(player, conversations, pool, max_tool_calling_iterations=trainer.max_tool_calling_iterations)
    for environment in environments:   # the batch waited once: spread over its rollouts (and so over their tallies)
        environment._count(env_seconds=(resets + calls) / len(environments), reset_seconds=resets / len(environments))
    log_tool_metrics(trainer, mode, [item.tool_calls for item in conversations],
                     [item.failed_calls for item in conversations])
    states = [conversation.state for conversation in conversations]
    return {
        "prompt_ids": [state["prompt_ids"] for state in states],
        "completion_ids": [state["completion_ids"] for state in states],
        "logprobs": [state["logprobs"] for state in states] if all("logprobs" in state for state in states) else None,
        "env_mask": [state["mask"] for state in states],
        EPISODE_PROMPTS: [conversation.messages[:len(conversation.game.prompt)] for conversation in conversations],
        EPISODE_MESSAGES: [conversation.messages[len(conversation.game.prompt):] for conversation in conversations],
    }


def log_tool_metrics(trainer: Any, mode: str, calls: list[int], failures: list[int]) -> None:
    """TRL's tool metrics of a generation batch (`tools/call_frequency`, `tools/failure_frequency`): calls per
    rollout, and the share of calls that failed; `calls` and `failures` hold one count per rollout."""
    import torch

    def total(count: int) -> Any:   # over every process, as a tensor: TRL divides tensors (float32 figures)
        return trainer.accelerator.gather(torch.tensor(count, device=trainer.accelerator.device)).sum()

    rollouts = int(total(len(calls)).item())
    called, failed = total(sum(calls)), total(sum(failures))
    trainer._metrics[mode]["tools/call_frequency"].append((called / rollouts).item())
    trainer._metrics[mode]["tools/failure_frequency"].append((failed / called).item() if called > 0 else 0.0)
