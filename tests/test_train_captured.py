"""GRPO on captured episodes: TrainingTrace dicts become TRL rows as they are, and TRL's GRPOTrainer trains on them.

Offline, on CPU. The traces are made here the way a capture proxy makes them: the tiny model (built here from
nothing) samples each turn through transformers' `generate`, and the test records the exact prompt ids, sampled
ids and their log-probabilities, turn after turn, with tool results appended as token ids between turns.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest

from envkit.app.targets import app_from_environment, resolve_target
from envkit.play.binding import bind
from envkit.play.tasks import env_rows, task_prompt
from envkit.testing import running_server
from envkit.train.trace_rows import TraceError, trace_rows

TOOL_RESULT = "\n<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any, list[dict[str, Any]]]:
    """The tiny model warmed up on echo, its tokenizer, and echo's rows."""
    import torch

    torch.set_num_threads(1)
    return tiny_echo()


def tiny_echo() -> tuple[Any, Any, list[dict[str, Any]]]:
    """The tiny model warmed up on echo served here, its tokenizer, and echo's rows."""
    from envkit.play.tiny import TinyModelSpec, build_tiny_model

    target = resolve_target("echo")
    with running_server(app_from_environment(target.env_class, env_name="echo", max_concurrent_envs=4)) as url:
        cls = bind(url, name="echo")
        rows = env_rows({"echo": task_prompt("echo", cls.metadata)}, 8, 0)
        model, tokenizer, _ = build_tiny_model({"echo": cls}, rows, TinyModelSpec(warmup_steps=30))
        cls._close_all()
    return model, tokenizer, rows


def sample(model: Any, prompt: list[int], max_new_tokens: int = 24) -> tuple[list[int], list[float]]:
    """Sample one completion at temperature 1 (no top-k) and the log-probability of each sampled id."""
    import torch

    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             max_new_tokens=max_new_tokens, output_logits=True, return_dict_in_generate=True)
    ids = out.sequences[0, len(prompt):].tolist()
    logprobs = [float(torch.log_softmax(logits[0].float(), dim=-1)[token]) for logits, token in zip(out.logits, ids)]
    return ids, logprobs


def turn(node: str, prompt: list[int], completion: list[int], logprobs: list[float]) -> dict[str, Any]:
    return {"node_id": node, "prompt_token_ids": prompt, "completion_token_ids": completion,
            "per_token_logps": logprobs, "loss_mask": [0] * len(prompt) + [1] * len(completion)}


def prompt_ids(tokenizer: Any, row: dict[str, Any]) -> list[int]:
    return list(tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True,
                                              return_dict=False, enable_thinking=False))


def captured(model: Any, tokenizer: Any, row: dict[str, Any], turns: int = 2) -> dict[str, Any]:
    """A TrainingTrace of `turns` model calls, each prompt the last one's ids, its sample and a tool result."""
    prompt = prompt_ids(tokenizer, row)
    trace: dict[str, Any] = {"schema_version": 1, "turns": []}
    for index in range(turns):
        completion, logprobs = sample(model, prompt)
        trace["turns"].append(turn(f"n{index}", prompt, completion, logprobs))
        prompt = prompt + completion + tokenizer.encode(TOOL_RESULT, add_special_tokens=False)
    return trace


def test_one_chain_is_one_row_of_the_last_turn(tiny: Any) -> None:
    model, tokenizer, rows = tiny
    trace = captured(model, tokenizer, rows[0], turns=3)
    [row] = trace_rows(trace)
    first, last = trace["turns"][0], trace["turns"][-1]
    assert row.prompt_ids == first["prompt_token_ids"]
    assert row.prompt_ids + row.completion_ids == last["prompt_token_ids"] + last["completion_token_ids"]
    assert len(row.env_mask) == len(row.logprobs) == len(row.completion_ids)
    start = len(first["prompt_token_ids"])
    for item in trace["turns"]:   # every sampled id trains, at its own place, with its own log-probability
        begin = len(item["prompt_token_ids"]) - start
        end = begin + len(item["completion_token_ids"])
        assert row.env_mask[begin:end] == [1] * (end - begin)
        assert row.logprobs[begin:end] == item["per_token_logps"]
        assert row.completion_ids[begin:end] == item["completion_token_ids"]
    assert row.trained_tokens == sum(len(item["completion_token_ids"]) for item in trace["turns"])


def test_a_rewritten_history_starts_a_row_of_its_own(tiny: Any) -> None:
    """A turn whose prompt does not extend the last turn's ids is a new root: one row per root."""
    model, tokenizer, rows = tiny
    trace = captured(model, tokenizer, rows[0], turns=2)
    prompt = prompt_ids(tokenizer, rows[1])   # the agent starts over with another history
    completion, logprobs = sample(model, prompt)
    trace["turns"].append(turn("n2", prompt, completion, logprobs))
    first, second = trace_rows(trace)
    assert second.prompt_ids == prompt and second.completion_ids == completion and second.logprobs == logprobs
    assert first.prompt_ids + first.completion_ids == (trace["turns"][1]["prompt_token_ids"]
                                                       + trace["turns"][1]["completion_token_ids"])


def test_untrained_samples_and_empty_chains(tiny: Any) -> None:
    """A sampled id the capture left untrained is context (mask 0, log-probability 0.0); a chain with nothing to
    train makes no row."""
    model, tokenizer, rows = tiny
    trace = captured(model, tokenizer, rows[0], turns=2)
    first = trace["turns"][0]
    first["loss_mask"] = [0] * len(first["loss_mask"])
    [row] = trace_rows(trace)
    size = len(first["completion_token_ids"])
    assert row.env_mask[:size] == [0] * size and row.logprobs[:size] == [0.0] * size
    trace["turns"] = [first]
    assert trace_rows(trace) == []


@pytest.mark.parametrize(("change", "says"), [
    (lambda t: t["turns"][0]["loss_mask"].__setitem__(0, 1), "marks prompt positions"),
    (lambda t: t["turns"][0]["per_token_logps"].pop(), "one log-probability per completion id"),
    (lambda t: t["turns"][0]["per_token_logps"].__setitem__(0, 0.5), "none above 0"),
    (lambda t: t["turns"][0]["loss_mask"].pop(), "must cover prompt and completion"),
    (lambda t: t["turns"][0]["prompt_token_ids"].__setitem__(0, "a"), "non-negative integer token ids"),
    (lambda t: t.__setitem__("schema_version", 2), "schema_version 2 is not supported"),
])
def test_invalid_traces_are_refused_in_one_line(tiny: Any, change: Any, says: str) -> None:
    model, tokenizer, rows = tiny
    trace = captured(model, tokenizer, rows[0], turns=1)
    change(trace)
    with pytest.raises(TraceError, match=says) as caught:
        trace_rows(trace)
    assert "\n" not in str(caught.value)


def test_grpo_trains_on_the_captured_rows_as_they_are(tiny: Any, tmp_path: Path) -> None:
    """TRL's GRPOTrainer with the captured rollout_func: the completion ids TRL scores are the trace's, a rollout
    scored None leaves its group (the logged reward is the mean of the others), and TRL's metric names are logged."""
    from datasets import Dataset
    from trl import GRPOConfig

    from envkit.train.captured import AgentOutcome, Rollout, captured_rollout_func, harness_reward
    from envkit.train.rollouts import GRPOTrainer

    model, tokenizer, rows = tiny
    made: list[list[Rollout]] = []
    scored: list[list[list[int]]] = []

    def collect(prompts: list[Any], trainer: Any) -> list[Rollout]:
        batch = []
        for index, prompt in enumerate(prompts):
            trace = captured(trainer.model, tokenizer, {"prompt": prompt}, turns=2)
            reward = None if index == 0 else float(len(trace["turns"][-1]["completion_token_ids"]))
            batch.append(Rollout(trace, reward, AgentOutcome(reward, [], [], 2, index % 2, {}, False)))
        made.append(batch)
        return batch

    def reward(completions: list[Any], completion_ids: list[list[int]], **kwargs: Any) -> list[float | None]:
        scored.append([list(ids) for ids in completion_ids])
        return harness_reward(completions, **kwargs)

    reward.__name__ = "harness_reward"
    config = GRPOConfig(output_dir=str(tmp_path), max_steps=2, num_generations=4, per_device_train_batch_size=4,
                        learning_rate=1e-3, use_cpu=True, report_to=[], logging_steps=1, save_strategy="no",
                        max_completion_length=128, beta=0.0, chat_template_kwargs={"enable_thinking": False})
    trainer = GRPOTrainer(model=copy.deepcopy(model), reward_funcs=reward, args=config,
                          train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                          rollout_func=captured_rollout_func(collect))
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert len(logs) == len(made) == len(scored) == 2
    for batch, ids, log in zip(made, scored, logs, strict=True):
        assert ids == [trace_rows(item.trace)[0].completion_ids for item in batch]
        kept = [item.reward for item in batch if item.reward is not None]
        assert log["reward"] == pytest.approx(sum(kept) / len(kept), rel=1e-5)
        assert log["rewards/harness_reward/mean"] == pytest.approx(log["reward"], rel=1e-5)
        assert log["tools/call_frequency"] == 2.0 and log["tools/failure_frequency"] == 0.25
        assert log["rollout/turns_mean"] == 2.0 and log["rollout/samples_per_rollout"] == 1.0
        assert not math.isnan(log["loss"])


def test_every_root_of_a_rollout_trains(tiny: Any, tmp_path: Path) -> None:
    """A rollout whose agent rewrote its history made two roots: CapturedGRPOTrainer trains both, the second as a row
    of its own in the batch with the rollout's advantage (ids, mask and log-probabilities as captured); filler rows
    (nothing trained) keep the batch divisible into its steps_per_generation parts."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    from envkit.train.captured import CapturedGRPOTrainer, Rollout, captured_rollout_func, harness_reward

    model, tokenizer, rows = tiny
    batches: list[tuple[list[Rollout], dict[str, Any]]] = []

    def collect(prompts: list[Any], trainer: Any) -> list[Rollout]:
        batch = []
        for index, prompt in enumerate(prompts):
            trace = captured(trainer.model, tokenizer, {"prompt": prompt}, turns=1)
            if index % 2:   # the agent starts over: a second root
                restart = prompt_ids(tokenizer, rows[index % len(rows)])
                completion, logprobs = sample(trainer.model, restart)
                trace["turns"].append(turn("n9", restart, completion, logprobs))
            batch.append(Rollout(trace, float(index)))
        batches.append((batch, {}))
        return batch

    class Recording(CapturedGRPOTrainer):
        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            out = super()._generate_and_score_completions(inputs)
            batches[-1][1].update(out)
            return out

    config = GRPOConfig(output_dir=str(tmp_path), max_steps=1, num_generations=4, per_device_train_batch_size=4,
                        gradient_accumulation_steps=3, learning_rate=1e-3, use_cpu=True, report_to=[],
                        logging_steps=1, save_strategy="no", max_completion_length=128, beta=0.0,
                        chat_template_kwargs={"enable_thinking": False})
    trainer = Recording(model=copy.deepcopy(model), reward_funcs=harness_reward, args=config,
                        train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                        rollout_func=captured_rollout_func(collect))
    trainer.train()
    [(rollouts, batch)] = batches
    size = len(rollouts)
    seconds = [index for index in range(size) if index % 2]
    total = size + len(seconds)
    total += -total % 3
    assert batch["completion_ids"].shape[0] == total and batch["advantages"].shape[0] == total
    for place, index in enumerate(seconds):
        row = sorted(trace_rows(rollouts[index].trace), key=lambda item: -item.trained_tokens)[1]   # not the first row
        line = size + place
        completion = batch["completion_ids"][line][batch["completion_mask"][line].bool()].tolist()
        assert completion == row.completion_ids
        assert batch["tool_mask"][line][:len(row.env_mask)].tolist() == row.env_mask
        assert batch["sampling_per_token_logps"][line][:len(row.logprobs)].tolist() == pytest.approx(row.logprobs)
        prompt = batch["prompt_ids"][line][batch["prompt_mask"][line].bool()].tolist()
        assert prompt == row.prompt_ids
        assert batch["advantages"][line] == batch["advantages"][index]
    fillers = slice(size + len(seconds), None)
    assert not (batch["completion_mask"][fillers] * batch["tool_mask"][fillers]).any()
    trained = (batch["completion_mask"] * batch["tool_mask"]).sum()
    assert batch["num_items_in_batch"] == trained
    assert all(math.isfinite(entry["loss"]) for entry in trainer.state.log_history if "loss" in entry)
    assert torch.is_tensor(batch["advantages"])
