"""Reward functions for TRL, chosen by name with `--reward` (repeatable).

    --reward env                 the environment's own reward, summed over the episode (the default)
    --reward win                 a reward component the environment reports (`reward_components` in its observations)
    --reward wordle.win          the same, for one environment of several
    --reward my_rewards:brevity  a function of yours, called as TRL calls reward functions
    --reward invalid=-0.5        any of the above with a weight (GRPOConfig.reward_weights)

Without `--reward`, each environment trains on the rewards it declares (`TRAIN_REWARDS`, published as
`train_rewards` in `/metadata`; Wordle: `played`), else on its own reward (`env`).

Each environment gets its own function (`echo_reward`, `wordle_win`, ...), which scores that
environment's rows and returns None for the others, so TRL logs a reward per environment.

A component's value in an episode is the latest value the environment reported for it in an
observation's `reward_components` mapping (Wordle reports win, speed, greens, yellows, partial and
invalid_moves after every move); an episode that never reported it scores 0.

Lost episodes (the session dropped mid-game) are unscorable: every function returns None for
them, your own included, so TRL leaves them out of the group baseline and gives them no
advantage. They are counted in the `episodes/lost` metric.

An episode is abandoned when its environment declares an episode length (`episode_length` in
`/metadata`, e.g. Catch's 9 moves) and the model left it before the environment ended it (it
stopped calling tools, or ran out of turns or tokens). It has no outcome, and scoring it 0 would
rank quitting above losing (Catch's miss is -1), so GRPO would learn to quit. `env` scores it the
lowest reward the environment declares (`reward_range` in `/metadata`), and leaves it unscored when
there is none. A component is the environment's standing after each move, so a component reward scores
an abandoned episode as it stood when the model left it (the latest value reported, 0 before any): for
Wordle's `guide_*` components, what TRL's guide scores a rollout that stops before the game ends (not
won: `guide_win` 0; `guide_partial` from the best guess so far; `guide_invalid` from the invalid moves
so far). A step's component reward is NaN only when none of its environment's episodes could be scored
(every one lost).
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ConfigurationError
from ..play.binding import ServedEnvironment

__all__ = ["RewardChoice", "parse_reward", "train_rewards", "reward_functions", "abandoned", "has_unparsed_tool_call",
           "UNPARSED_METRIC"]

ENV_REWARD = "env"
#: The share of a step's completions holding a tool call TRL could not parse (logged as a TRL metric).
UNPARSED_METRIC = "tools/unparsed_share"
TOOL_CALL_TAG = "<tool_call>"


@dataclass(frozen=True)
class RewardChoice:
    """One `--reward` value: the environment's reward, a component, or a user function; with a weight."""

    kind: str  # "env", "component" or "function"
    name: str
    env: str | None = None
    weight: float = 1.0


def parse_reward(text: str) -> RewardChoice:
    """Parse `env`, `COMPONENT`, `ENV.COMPONENT`, `module:function`, each optionally followed by `=WEIGHT`."""
    spec, weight = text.strip(), 1.0
    if "=" in spec:
        spec, _, raw = spec.rpartition("=")
        try:
            weight = float(raw)
        except ValueError:
            raise ConfigurationError(f"--reward {text!r}: the weight after '=' must be a number, "
                                     "e.g. win=0.5") from None
    if not spec:
        raise ConfigurationError(f"--reward {text!r}: name a reward (env, a component, or module:function)")
    if ":" in spec:
        return RewardChoice("function", spec, None, weight)
    env, _, name = spec.rpartition(".")
    kind = "env" if name == ENV_REWARD else "component"
    return RewardChoice(kind, name, env or None, weight)


def train_rewards(classes: Mapping[str, type[ServedEnvironment]]) -> list[RewardChoice]:
    """The rewards each environment declares for training (`train_rewards` in its `/metadata`), bound to that
    environment; `env` for one that declares none. What `envkit train` uses when `--reward` is not given."""
    choices = []
    for env, cls in classes.items():
        declared = cls.metadata.get("train_rewards")
        for spec in declared if isinstance(declared, list) and declared else [ENV_REWARD]:
            choice = parse_reward(str(spec))
            choices.append(choice if choice.kind == "function" else replace(choice, env=env))
    return choices


def reward_functions(choices: Sequence[RewardChoice], classes: Mapping[str, type[ServedEnvironment]],
                     observe: Callable[[dict[str, Any]], None] | None = None
                     ) -> tuple[list[Callable[..., list[float | None]]], list[float]]:
    """The reward functions and weights for TRL; the first function also logs `episodes/lost` and hands each
    batch's keyword arguments (prompts, completions, environments) to `observe`."""
    functions: list[Callable[..., list[float | None]]] = []
    weights: list[float] = []
    for choice in choices:
        envs = _envs_for(choice, classes)
        for env in envs:
            if choice.kind == "env":
                functions.append(_scorer(f"{env}_reward", env, _env_reward))
            elif choice.kind == "component":
                functions.append(_scorer(f"{env}_{choice.name}", env, _component(choice.name)))
        if choice.kind == "function":
            functions.append(_user_function(choice.name))
            envs = [""]
        weights.extend([choice.weight] * len(envs))
    _log_rubric_components(functions, weights, classes)
    names = [function.__name__ for function in functions]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigurationError(f"--reward: {', '.join(repeated)} chosen twice; name each reward once")
    if functions:
        functions[0] = _counting_lost(functions[0], observe)
    return functions, weights


def _log_rubric_components(functions: list[Callable[..., list[float | None]]], weights: list[float],
                           classes: Mapping[str, type[ServedEnvironment]]) -> None:
    """Each rubric component an environment publishes (`rubric_components` in its `/metadata`) and no `--reward`
    chose, as a reward of weight 0: TRL logs it, so it is a column of the run's metrics."""
    chosen = {function.__name__ for function in functions}
    for env, cls in classes.items():
        published = cls.metadata.get("rubric_components")
        for name in published if isinstance(published, list) else ():
            if f"{env}_{name}" not in chosen:
                functions.append(_scorer(f"{env}_{name}", env, _component(str(name))))
                weights.append(0.0)


def _envs_for(choice: RewardChoice, classes: Mapping[str, type[ServedEnvironment]]) -> list[str]:
    if choice.kind == "function":
        return []
    if choice.env is not None and choice.env not in classes:
        raise ConfigurationError(f"--reward {choice.env}.{choice.name}: no environment {choice.env!r} in this run "
                                 f"({', '.join(classes)})")
    envs = [choice.env] if choice.env is not None else list(classes)
    if choice.kind == "env":
        return envs
    documented = [env for env in envs if choice.name in classes[env].component_names]
    if not documented:
        offered = {env: list(classes[env].component_names) for env in envs}
        listing = "; ".join(f"{env}: {', '.join(names) or 'none'}" for env, names in offered.items())
        raise ConfigurationError(f"--reward {choice.name}: no environment reports a reward component of that name "
                                 f"(reported components — {listing}); use --reward env for the environment's "
                                 "own reward")
    return documented


def _env_reward(environment: ServedEnvironment) -> float | None:
    """The environment's reward; for an abandoned episode the lowest it declares, or None (unscored)."""
    assert environment.episode is not None
    if not abandoned(environment):
        return environment.episode.reward
    declared = environment.metadata.get("reward_range")
    return float(declared[0]) if isinstance(declared, list) and len(declared) == 2 else None


def _component(name: str) -> Callable[[ServedEnvironment], float | None]:
    def score(environment: ServedEnvironment) -> float | None:
        assert environment.episode is not None
        return environment.episode.components.get(name, 0.0)   # finished or abandoned: its latest standing

    return score


def _scorer(name: str, env: str, score: Callable[[ServedEnvironment], float | None]
            ) -> Callable[..., list[float | None]]:
    def reward(environments: Sequence[ServedEnvironment], **_: Any) -> list[float | None]:
        return [score(item) if _scorable(item) and item.env_name == env else None for item in environments]

    reward.__name__ = reward.__qualname__ = name
    return reward


def _scorable(environment: ServedEnvironment) -> bool:
    return environment.episode is not None and environment.episode.lost is None


def abandoned(environment: ServedEnvironment) -> bool:
    """The episode was left unfinished in an environment whose episodes have a set length."""
    return (environment.episode is not None and not environment.episode.done
            and bool(environment.metadata.get("episode_length")))


def has_unparsed_tool_call(completion: Any) -> bool:
    """Whether a completion holds a `<tool_call>` TRL could not parse: TRL keeps a parsed call in `tool_calls`
    and falls back to the raw text, tag included, for one it cannot read (so no tool runs for it)."""
    if isinstance(completion, str):
        return TOOL_CALL_TAG in completion
    return any(isinstance(message, dict) and message.get("role") == "assistant"
               and TOOL_CALL_TAG in str(message.get("content") or "") for message in completion)


def _percentile(ordered: Sequence[float], share: float) -> float:
    """The value at `share` of a sorted list, interpolated between neighbours."""
    position = share * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _masked(values: Sequence[float | None], environments: Sequence[ServedEnvironment]) -> list[float | None]:
    return [value if _scorable(item) else None for value, item in zip(values, environments, strict=True)]


def _user_function(spec: str) -> Callable[..., list[float | None]]:
    from ..app.targets import import_attribute

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    function = import_attribute(spec)
    if not callable(function):
        raise ConfigurationError(f"--reward {spec}: {function!r} is not a function")
    if inspect.iscoroutinefunction(function):
        async def reward_async(**kwargs: Any) -> list[float | None]:
            return _masked(await function(**kwargs), kwargs["environments"])

        wrapped: Callable[..., Any] = reward_async
    else:
        def reward(**kwargs: Any) -> list[float | None]:
            return _masked(function(**kwargs), kwargs["environments"])

        wrapped = reward
    wrapped.__name__ = wrapped.__qualname__ = getattr(function, "__name__", spec.rpartition(":")[2])
    return wrapped


def _counting_lost(function: Callable[..., Any], observe: Callable[[dict[str, Any]], None] | None
                   ) -> Callable[..., Any]:
    """Log how many episodes of the batch were lost (TRL's `log_metric`), show the batch to `observe`, then
    score as `function` does."""

    def log(kwargs: dict[str, Any]) -> None:
        environments = kwargs["environments"]
        lost = sum(1 for item in environments if item.episode is not None and item.episode.lost)
        kwargs["log_metric"]("episodes/lost", float(lost))
        completions = kwargs.get("completions") or []
        if completions:
            unparsed = sum(1 for completion in completions if has_unparsed_tool_call(completion))
            kwargs["log_metric"](UNPARSED_METRIC, unparsed / len(completions))
        # the environment's reward as `env` scores it (an abandoned episode at the lowest the environment declares)
        scored = (_env_reward(item) for item in environments if _scorable(item))
        rewards = sorted(reward for reward in scored if reward is not None)
        if rewards:
            kwargs["log_metric"]("reward/p10", _percentile(rewards, 0.1))
            kwargs["log_metric"]("reward/p90", _percentile(rewards, 0.9))
        if observe is not None:
            observe(kwargs)

    if inspect.iscoroutinefunction(function):
        async def counted_async(**kwargs: Any) -> Any:
            log(kwargs)
            return await function(**kwargs)

        counted: Callable[..., Any] = counted_async
    else:
        def counted_sync(**kwargs: Any) -> Any:
            log(kwargs)
            return function(**kwargs)

        counted = counted_sync
    counted.__name__ = counted.__qualname__ = function.__name__
    return counted
