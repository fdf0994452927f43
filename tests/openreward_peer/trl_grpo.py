"""TRL's OpenRewardSpec against an envkit Wordle server: the three GRPOTrainer inputs, then GRPO steps on CPU.

Run in the openreward venv (which also sees trl, torch and envkit). Usage: trl_grpo.py URL OUTPUT_DIR STEPS
Prints one JSON object. The tiny policy is built offline by envkit (warmed up on scripted episodes played over
the same server's /ws); the rewards the trainer scored are checked against a local replay of every call.
"""

from __future__ import annotations

import json
import math
import sys

import torch
from trl import GRPOConfig, GRPOTrainer
from trl.experimental.openreward import OpenRewardSpec

from envkit.app.targets import resolve_target
from envkit.play.binding import bind
from envkit.play.tiny import CHAT_TEMPLATE_KWARGS, TinyModelSpec, build_tiny_model

url, output_dir, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
report: dict = {}
spec = OpenRewardSpec(url, env_name="wordle", num_tasks=8)

dataset = spec.train_dataset
report["columns"] = sorted(dataset.column_names)
report["rows"] = [{k: v for k, v in row.items() if k != "prompt"} for row in dataset.select(range(3))]

factory = spec.environment_factory
probe = factory()
report["probe_prompt"] = probe.reset(task_index=0)
report["probe_tools"] = sorted(name for name in vars(type(probe)) if not name.startswith("_") and name != "reset")
report["probe_guess"] = probe.guess(guess="[crane]")
report["probe_reward"] = probe.reward
Wordle = resolve_target("wordle").env_class
import wordle_env.words  # noqa: E402 (importable once resolve_target has found the bundled env)

secret = wordle_env.words.secret_words()[Wordle.task("train", 0)["secret_index"]]
report["probe_win"] = probe.guess(guess=f"[{secret}]")
report["probe_finished"], report["probe_scored"] = probe.finished, spec.reward_funcs(environments=[probe])
probe._close()

# Record every call the trainer's environments make, to replay them on a local Wordle afterwards.
rollout_cls = type(probe)
original_reset, original_call = rollout_cls.reset, rollout_cls._call_ors_tool


def reset(self, **row):
    self.calls, self.task_index = [], row.get("task_index", 0)
    return original_reset(self, **row)


def call_ors_tool(self, tool_name, tool_input):
    text = original_call(self, tool_name, tool_input)
    failed = text.startswith("Error:")
    self.calls.append((tool_name, dict(tool_input), None if failed else self.rewards[-1], self.finished))
    return text


rollout_cls.reset, rollout_cls._call_ors_tool = reset, call_ors_tool

scored: list[list] = []


def record(environments, **kwargs):
    """Zero-weight reward function: what the spec's reward function gives, and each rollout's calls."""
    rewards = spec.reward_funcs(environments=environments)
    scored.append([(reward, env.task_index, env.calls) for reward, env in zip(rewards, environments)])
    return [0.0] * len(environments)


torch.manual_seed(0)
torch.set_num_threads(1)
classes = {"wordle": bind(url, name="wordle")}
rows = [dict(row) for row in dataset]
model, tokenizer, figures = build_tiny_model(classes, rows, TinyModelSpec(episodes=8, warmup_steps=60))
config = GRPOConfig(output_dir=output_dir, max_steps=steps, learning_rate=2e-3, num_generations=4,
                    per_device_train_batch_size=4, max_completion_length=96, max_tool_calling_iterations=2,
                    chat_template_kwargs=CHAT_TEMPLATE_KWARGS, logging_steps=1, save_strategy="no", report_to=[],
                    disable_tqdm=True, remove_unused_columns=False, use_cpu=True, beta=0.0, seed=0,
                    reward_weights=[1.0, 0.0])
trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config, train_dataset=dataset,
                      environment_factory=factory, reward_funcs=[spec.reward_funcs, record])
trainer.train()

# Replay every rollout's successful calls on a local Wordle with the same task: the rewards must match.
mismatches, calls, scored_rewards = [], 0, []
for batch in scored:
    for reward, task_index, made in batch:
        local = Wordle()
        local.reset(**Wordle.task("train", task_index))
        last = None
        for tool_name, tool_input, remote_reward, finished in made:
            if remote_reward is None and not finished:
                continue   # refused before reaching the environment (bad arguments) or after the game ended
            observation = getattr(local, tool_name)(**tool_input)
            calls += 1
            if observation.reward != remote_reward or observation.done != finished:
                mismatches.append((task_index, tool_input, observation.reward, remote_reward))
            last = observation.reward if observation.reward is not None else last
        if reward != last:
            mismatches.append(("episode", task_index, reward, last))
        scored_rewards.append(reward)
logged = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
expected = []
for batch in scored:
    values = [r if r is not None else 0.0 for r, _, _ in batch]
    expected.append(sum(values) / len(values))
report.update(steps=trainer.state.global_step, calls_replayed=calls, mismatches=mismatches,
              batches=len(scored), logged_rewards=logged, expected_rewards=expected,
              any_reward=any(r is not None for r in scored_rewards),
              finite=all(math.isfinite(x) for x in logged))
print(json.dumps(report))
