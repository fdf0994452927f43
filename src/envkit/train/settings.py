"""Settings of a training run: defaults, a YAML config file, command-line flags, and the GRPOConfig they make.

Precedence: a flag given on the command line beats the config file, which beats the defaults.
Defaults depend on the model: `--model tiny` gets settings that finish on a laptop CPU in a
minute or two; any other model gets TRL's defaults for a real run. The turn and token budgets of
an episode (`max_tool_calling_iterations`, `max_completion_length`), when not set, are fitted to
the environments once they are bound (`fitted`): to the episode length they declare, and for the
tiny model to the length of its warm-up episodes in tokens.

A config file uses the same names as the flags (`max_steps` or `max-steps`), plus an optional
`grpo:` table of any other `GRPOConfig` field (`--config wordle-grpo` names a config shipped in
envkit/train/recipes/: TRL's Wordle guide):

    model: Qwen/Qwen3-1.7B
    env: [wordle]
    vllm_mode: colocate
    num_generations: 16
    grpo:
      lr_scheduler_type: constant
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError
from ..play.models import (SEED_EPISODES, TINY, TINY_GAME_STEPS, TINY_LR_WARMUP_STEPS, chat_template_kwargs,
                           model_defaults)
from ..play.tasks import TEST_SPLIT, TRAIN_SPLIT

__all__ = ["TrainSettings", "load_config", "settings_from", "model_defaults", "TINY", "DEFAULT_OUTPUT_DIR",
           "TINY_GAME_STEPS", "SEED_EPISODES"]

DEFAULT_OUTPUT_DIR = "envkit-train"
#: What a finished (or stopped) run leaves in its output folder.
RUN_FILES = ("metrics.jsonl", "metrics.csv", "reward_curve.png", "model")
VLLM_MODES = ("none", "colocate", "server")
REPORT_TO = ("none", "trackio")
PROTOCOLS = ("auto", "envkit", "ors")


#: Settings whose default depends on the environments' episodes: filled in by `TrainSettings.fitted` once they
#: are bound, not by `resolved`.
FITTED = ("max_steps", "learning_rate", "max_completion_length", "max_tool_calling_iterations")


@dataclass
class TrainSettings:
    """Everything `envkit train` needs; None means "the default for this model"."""

    env: list[str] = field(default_factory=lambda: ["echo"])
    env_url: list[str] = field(default_factory=list)
    model: str = TINY
    output_dir: str = DEFAULT_OUTPUT_DIR
    overwrite: bool = False
    max_steps: int | None = None
    learning_rate: float | None = None
    num_generations: int | None = None
    batch_size: int | None = None
    gradient_accumulation_steps: int = 1
    max_completion_length: int | None = None
    max_tool_calling_iterations: int | None = None
    temperature: float = 1.0
    beta: float = 0.0
    enable_thinking: bool | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    vllm_mode: str = "none"
    vllm_gpu_memory_utilization: float = 0.3
    vllm_max_model_length: int | None = None
    vllm_enable_sleep_mode: bool = False
    vllm_kv_cache_gib: int | None = None   # vLLM's CPU build only; None: VLLM_CPU_KVCACHE_SPACE, else a default
    vllm_server_url: str | None = None
    reward: list[str] = field(default_factory=list)   # empty: each environment's `train_rewards`, else env
    dataset: str | None = None
    num_episodes: int | None = None   # None: every task of the split once, or SEED_EPISODES seeded rows
    split: str | None = None   # None: each environment's `train` split, else seeds
    train_on_test: bool = False   # `--split test` is refused without it
    protocol: str = "auto"
    eval_games: int = 0
    transcripts_per_step: int = 4
    seed: int = 0
    report_to: str = "none"
    reconnect_timeout: float = 30.0
    save_model: bool = True
    agent: str | None = None   # `reference` or a shell command: a loop-owning agent per rollout (agent_rollouts)
    agent_timeout: float = 300.0
    rollout_reward: str | None = None   # module:function of an AgentOutcome; None: the environment's verifier
    grpo: dict[str, Any] = field(default_factory=dict)

    @property
    def tiny(self) -> bool:
        return self.model == TINY

    def resolved(self) -> TrainSettings:
        """A copy with model-dependent defaults filled in and every value checked."""
        defaults = {name: value for name, value in model_defaults(self.tiny).items() if name not in FITTED}
        values = {name: getattr(self, name) if getattr(self, name) is not None else default
                  for name, default in defaults.items()}
        if self.num_generations is None and self.batch_size is not None:
            values["num_generations"] = _group_size(self.batch_size * self.gradient_accumulation_steps,
                                                    defaults["num_generations"])
        done = dataclasses.replace(self, **values)
        done.check()
        return done

    def fitted(self, episode_length: int | None, episode_tokens: int | None = None) -> TrainSettings:
        """A copy with the settings not given fitted to the environments' episodes (see `model_defaults`)."""
        defaults = model_defaults(self.tiny, episode_length, episode_tokens)
        return dataclasses.replace(self, **{name: getattr(self, name) if getattr(self, name) is not None
                                            else defaults[name] for name in FITTED})

    def check(self) -> None:
        """Raise `ConfigurationError` for values that cannot work, saying which and what to do."""
        positive = ("max_steps", "num_generations", "batch_size", "gradient_accumulation_steps",
                    "max_completion_length", "max_tool_calling_iterations", "num_episodes")
        for name in positive:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigurationError(f"{_flag(name)} must be a positive integer, got {value!r}")
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise ConfigurationError(f"--learning-rate must be positive, got {self.learning_rate!r}")
        if self.num_generations is not None and self.num_generations < 2:
            raise ConfigurationError("--num-generations must be at least 2: GRPO compares each completion with the "
                                     "others of its group")
        if self.batch_size and self.num_generations and (
                self.batch_size * self.gradient_accumulation_steps) % self.num_generations:
            raise ConfigurationError(
                f"--batch-size × --gradient-accumulation-steps ({self.batch_size} × {self.gradient_accumulation_steps})"
                f" must be a multiple of --num-generations ({self.num_generations}): each prompt's generations "
                "are scored together")
        if self.vllm_mode not in VLLM_MODES:
            raise ConfigurationError(f"--vllm-mode must be one of {', '.join(VLLM_MODES)}, got {self.vllm_mode!r}")
        if not 0 < self.vllm_gpu_memory_utilization <= 1:
            raise ConfigurationError("--vllm-gpu-memory-utilization must be in (0, 1], e.g. 0.3")
        if self.vllm_kv_cache_gib is not None and self.vllm_kv_cache_gib < 1:
            raise ConfigurationError("--vllm-kv-cache-gib must be a whole number of GiB, 1 or more")
        if self.protocol not in PROTOCOLS:
            raise ConfigurationError(f"--protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        if self.protocol == "ors" and not self.env_url:
            raise ConfigurationError("--protocol ors needs --env-url: the environments served here speak envkit's "
                                     "protocol (and ORS too)")
        if self.report_to not in REPORT_TO:
            raise ConfigurationError(f"--report-to must be one of {', '.join(REPORT_TO)}, got {self.report_to!r}")
        if self.report_to == "trackio" and importlib.util.find_spec("trackio") is None:
            raise ConfigurationError("--report-to trackio needs the trackio package: pip install trackio")
        if not self.env and not self.env_url:
            raise ConfigurationError("name an environment with --env (e.g. --env echo) or a server with --env-url")
        if self.env_url and self.env and len(self.env) != len(self.env_url):
            raise ConfigurationError(
                f"{len(self.env)} --env names for {len(self.env_url)} --env-url servers: give one name per server "
                "(in the same order), or leave out --env to use the names the servers report")
        if self.split == TEST_SPLIT and not self.train_on_test:
            raise ConfigurationError(f"--split {TEST_SPLIT}: those are the games envkit eval and --eval-games score; "
                                     f"train on {TRAIN_SPLIT} (the default), or pass --train-on-test to train on them "
                                     "anyway")
        if self.eval_games < 0:
            raise ConfigurationError("--eval-games must be 0 (no evaluation) or a number of test games")
        if self.transcripts_per_step < 0:
            raise ConfigurationError("--transcripts-per-step must be 0 (none) or more")
        if self.reconnect_timeout < 0:
            raise ConfigurationError("--reconnect-timeout must be zero or positive (seconds)")
        self._check_agent()

    def _check_agent(self) -> None:
        if self.agent is None:
            if self.rollout_reward is not None:
                raise ConfigurationError("--rollout-reward scores --agent rollouts: give --agent too")
            return
        if not self.agent.strip():
            raise ConfigurationError("--agent must be 'reference' or the shell command that runs your agent")
        if self.env_url:
            raise ConfigurationError("--agent runs each agent in its environment's sandbox on this machine: name the "
                                     "environment with --env (served here), not --env-url")
        if self.vllm_mode == "server":
            raise ConfigurationError("--agent samples from the model being trained in this process: use --vllm-mode "
                                     "colocate (or none); to train against a vLLM server, use TRL's "
                                     "HarnessRolloutWorker with envkit.train.harness.AgentSessionFactory")
        if self.vllm_enable_sleep_mode:
            raise ConfigurationError("--vllm-sleep puts the engine the agents call to sleep between steps: leave it "
                                     "out with --agent")
        if self.eval_games:
            raise ConfigurationError("--eval-games plays TRL-driven games, not agents: leave it out with --agent")
        if not self.agent_timeout > 0:
            raise ConfigurationError(f"--agent-timeout must be a positive number of seconds, got "
                                     f"{self.agent_timeout!r}")
        if self.rollout_reward is not None and ":" not in self.rollout_reward:
            raise ConfigurationError(f"--rollout-reward {self.rollout_reward!r}: name a function as module:function")

    def claim_output_dir(self) -> TrainSettings:
        """A copy whose `output_dir` holds no earlier run's files, so that nothing is overwritten unasked.

        The default folder moves on to `envkit-train-2`, `-3`, ...; a folder the user named that holds a run
        raises `ConfigurationError` unless `overwrite` is set.
        """
        if self.overwrite or not _holds_run(Path(self.output_dir)):
            return self
        if self.output_dir != DEFAULT_OUTPUT_DIR:
            raise ConfigurationError(f"--output-dir {self.output_dir} holds an earlier run (metrics, model); pass "
                                     "--overwrite to replace it, or name another folder")
        number = 2
        while _holds_run(Path(f"{DEFAULT_OUTPUT_DIR}-{number}")):
            number += 1
        return dataclasses.replace(self, output_dir=f"{DEFAULT_OUTPUT_DIR}-{number}")

    def chat_kwargs(self) -> dict[str, Any]:
        """`chat_template_kwargs` for TRL, with `enable_thinking` folded in (the tiny model thinks never)."""
        return chat_template_kwargs(self.tiny, self.enable_thinking, self.chat_template_kwargs)

    def grpo_config(self, *, on_gpu: bool) -> Any:
        """The `trl.GRPOConfig` for these settings (call on resolved settings; unset budgets get `fitted(None)`'s)."""
        from trl import GRPOConfig

        if None in (self.max_completion_length, self.max_tool_calling_iterations, self.max_steps, self.learning_rate):
            return self.fitted(None).grpo_config(on_gpu=on_gpu)

        kwargs: dict[str, Any] = {
            "output_dir": self.output_dir,
            "max_steps": self.max_steps,
            "learning_rate": self.learning_rate,
            "num_generations": self.num_generations,
            "per_device_train_batch_size": self.batch_size,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "max_completion_length": self.max_completion_length,
            "max_tool_calling_iterations": self.max_tool_calling_iterations,
            "temperature": self.temperature,
            "beta": self.beta,
            "chat_template_kwargs": self.chat_kwargs(),
            "seed": self.seed,
            "warmup_steps": TINY_LR_WARMUP_STEPS if self.tiny else 0,
            "logging_steps": 1,
            "save_strategy": "no",
            "report_to": [] if self.report_to == "none" else [self.report_to],
            "disable_tqdm": True,
            "remove_unused_columns": False,
            "bf16": on_gpu and not self.tiny,
            "gradient_checkpointing": on_gpu and not self.tiny,
            "use_cpu": not on_gpu,
        }
        if self.report_to == "trackio":   # a project per environment set, a run per output folder
            kwargs.update(project="envkit-" + "-".join(self.env) if self.env else "envkit",
                          run_name=Path(self.output_dir).resolve().name)
        if self.vllm_mode != "none":
            kwargs.update(use_vllm=True, vllm_mode=self.vllm_mode,
                          vllm_gpu_memory_utilization=self.vllm_gpu_memory_utilization,
                          vllm_max_model_length=self.vllm_max_model_length,
                          vllm_enable_sleep_mode=self.vllm_enable_sleep_mode)
            if self.vllm_server_url:
                kwargs["vllm_server_base_url"] = self.vllm_server_url
        check_grpo_fields(self.grpo, "config file")
        kwargs.update(self.grpo)
        return GRPOConfig(**kwargs)


def check_grpo_fields(grpo: dict[str, Any], where: str) -> None:
    """Raise `ConfigurationError` naming the keys of a `grpo:` table that are not `trl.GRPOConfig` fields."""
    from trl import GRPOConfig

    known = [item.name for item in dataclasses.fields(GRPOConfig)]
    unknown = sorted(set(grpo) - set(known))
    if unknown:
        close = {name: difflib.get_close_matches(name, known, n=1) for name in unknown}
        hints = "; ".join(f"did you mean {match[0]}?" for match in close.values() if match)
        names = f"{unknown[0]} is not a GRPOConfig field" if len(unknown) == 1 else \
            f"{', '.join(unknown)} are not GRPOConfig fields"
        raise ConfigurationError(f"{where}: grpo: {names} ({hints or 'trl GRPOConfig documents the valid ones'})")


def _holds_run(folder: Path) -> bool:
    return any((folder / name).exists() for name in RUN_FILES)


def _group_size(episodes: int, default: int) -> int:
    """The default GRPO group size for a batch of `episodes` the user chose: the default when it divides them,
    else the largest divisor of them below it (a group holds 2 episodes at least)."""
    fitting = [size for size in range(default, 1, -1) if episodes % size == 0]
    return fitting[0] if fitting else default


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


_LIST_FIELDS = {"env", "env_url", "reward"}
_INT_FIELDS = {"max_steps", "num_generations", "batch_size", "gradient_accumulation_steps", "max_completion_length",
               "max_tool_calling_iterations", "vllm_max_model_length", "vllm_kv_cache_gib", "num_episodes", "seed",
               "eval_games", "transcripts_per_step"}
_FLOAT_FIELDS = {"learning_rate", "temperature", "beta", "vllm_gpu_memory_utilization", "reconnect_timeout",
                 "agent_timeout"}


def _coerced(name: str, value: Any, where: str) -> Any:
    """YAML reads `1e-6` as a string and `5` as an int where a float is meant; accept both."""
    kind = int if name in _INT_FIELDS else float if name in _FLOAT_FIELDS else None
    if kind is None or value is None or isinstance(value, bool):
        return value
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{where}: {name} must be a number, got {value!r}") from None
    if kind is int and number != float(value):
        raise ConfigurationError(f"{where}: {name} must be a whole number, got {value!r}")
    return number


#: Configs shipped with envkit, named by `--config NAME` (the file name without .yaml), e.g. `wordle-grpo`.
RECIPES = Path(__file__).resolve().parent / "recipes"


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file, or a shipped recipe by name, into settings values (names as `TrainSettings` fields)."""
    import yaml

    path = Path(path)
    if not path.exists() and (RECIPES / f"{path}.yaml").is_file():
        path = RECIPES / f"{path}.yaml"
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise ConfigurationError(f"--config {path}: cannot read it ({error.strerror})") from None
    except yaml.YAMLError as error:
        raise ConfigurationError(f"--config {path}: not valid YAML ({error})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigurationError(f"--config {path}: expected a mapping of settings (e.g. `max_steps: 50`)")
    known = {item.name: item for item in dataclasses.fields(TrainSettings)}
    values: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in known:
            raise ConfigurationError(f"--config {path}: unknown setting {key!r}; known: {', '.join(sorted(known))}")
        if name in _LIST_FIELDS and isinstance(value, str):
            value = [value]
        if name in ("grpo", "chat_template_kwargs") and not isinstance(value, dict):
            raise ConfigurationError(f"--config {path}: {key} must be a mapping")
        values[name] = _coerced(name, value, f"--config {path}")
    if values.get("grpo"):   # refused now, not after the environments are served and the model is built
        check_grpo_fields(values["grpo"], f"--config {path}")
    return values


def settings_from(config_path: str | Path | None, flags: dict[str, Any]) -> TrainSettings:
    """Defaults, then the config file, then the flags given (None and empty tuples mean "not given"); resolved."""
    values = load_config(config_path) if config_path else {}
    given = {name: list(value) if isinstance(value, tuple) else value for name, value in flags.items()
             if value is not None and value != ()}
    values.update(given)
    if values.get("env_url") and "env" not in values:
        values["env"] = []  # names come from the servers
    return TrainSettings(**values).resolved()
