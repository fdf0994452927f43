"""`--model tiny`: a tool-calling model of 100-200K parameters built on the spot, offline, in seconds.

A random model never emits a well-formed tool call, so GRPO would have nothing to reward. The
recipe, all local:

1. play scripted episodes against the served environments, rendering each as the chat TRL will
   build: prompt, `<tool_call>` turns, tool responses. Random but valid tool arguments; for a game
   (an environment with an episode length) whose package has a scripted solver, whole games played
   mostly by the solver (see `scripted_conversations`);
2. train a byte-level BPE tokenizer (`tokenizers`) on those conversations and give it TRL's
   own Qwen3 chat template string, which TRL recognises to parse `<tool_call>` blocks;
3. build a small `Qwen3ForCausalLM` from a config and train it briefly, supervised, on the
   assistant turns of the scripted episodes (not the random moves of a game, which only lead it
   into varied positions), so that it calls tools from the first GRPO step: each step on a
   mini-batch of the episodes, in shuffled order, padded to its own longest.

The scripted episodes are the first rows of the training data (`warmup_rows`), which `envkit train` takes
from an environment's `train` split when it declares one: the warm-up never plays a test task.

The model built for vLLM (`GPU_SPEC`) is also the one `envkit eval --openai-url` meets behind vLLM's server,
whose prompt lists the tools without TRL's `return` descriptions: it warms up on every conversation both ways
(`chat_api_tools`).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..environment import Environment
from .binding import ServedEnvironment, tool_names
from .policy_player import sample_argument, tool_players

__all__ = ["TinyModelSpec", "GPU_SPEC", "build_tiny_model", "warmup_rows", "scripted_conversations",
           "chat_api_tools", "CHAT_TEMPLATE_KWARGS"]

logger = logging.getLogger("envkit.train")

#: The tiny model answers without a thinking block: TRL's Qwen3 template then opens each turn with an empty one.
CHAT_TEMPLATE_KWARGS = {"enable_thinking": False}

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TAG_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


@dataclass
class TinyModelSpec:
    """Sizes of the tiny model and its warm-up.

    The defaults give 100-200K parameters: the vocabulary is at most `vocab_size`, as many tokens as
    the scripted conversations yield; a large one packs the recurring tool boilerplate into few
    tokens, which keeps sequences, and so the warm-up and every GRPO step, short.
    """

    vocab_size: int = 2048
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    episodes: int = 16
    #: Warm-up episodes when an environment has a scripted player: whole games, and more of them, since the
    #: model learns from them which move each position calls for.
    game_episodes: int = 32
    max_turns: int = 3
    scripted_share: float = 0.75
    warmup_steps: int = 100
    warmup_lr: float = 5e-3
    #: Episodes per warm-up step; with no more episodes than this, every step takes them all.
    warmup_batch_size: int = 16
    seed: int = 0
    #: Warm up on every conversation twice: with the tools as TRL renders them, and as vLLM's OpenAI-compatible
    #: server does (`chat_api_tools`), so the model also plays behind that server. Twice the warm-up's work.
    chat_api_tools: bool = False


#: For vLLM, on a GPU or its CPU build: attention kernels want a head size of 64 (the CPU build has none for 16);
#: and it is the model `vllm serve` serves to `envkit eval --openai-url`. Each episode is warmed up on twice (both
#: tool renderings), so a mini-batch holds twice as many conversations: the same 16 episodes' worth.
GPU_SPEC = TinyModelSpec(hidden_size=128, intermediate_size=256, num_heads=2, num_kv_heads=1, head_dim=64,
                         chat_api_tools=True, warmup_batch_size=32)

#: The fields of a function that the chat API defines, and all that vLLM's server hands its chat template.
CHAT_API_FUNCTION_FIELDS = ("name", "description", "parameters")


def _tool_schemas(environment: ServedEnvironment) -> list[dict[str, Any]]:
    from transformers.utils import get_json_schema

    return [get_json_schema(getattr(environment, name)) for name in tool_names(type(environment))]


Conversation = tuple[list[dict[str, Any]], list[dict[str, Any]]]


def scripted_conversations(classes: Mapping[str, type[ServedEnvironment]], rows: Sequence[dict[str, Any]],
                           *, max_turns: int, seed: int = 0, players: Mapping[str, type[Environment]] | None = None,
                           scripted_share: float = 0.75, rewards: list[float] | None = None) -> list[Conversation]:
    """Play one scripted episode per row over a real session; each as (chat messages, tool schemas).

    A game in `players` (an environment class served in this process, with an `EPISODE_LENGTH`) whose
    package has a scripted `solver` (`policies.TOOL_PLAYERS`, the players `envkit eval --policy` offers)
    is played to the end of the episode: each move is the solver's with probability `scripted_share`, else a random valid
    call. The random moves lead the game into varied positions but are marked `CONTEXT_ONLY`: the
    warm-up trains on the solver's moves alone, so the model learns to play whole episodes, and which
    move each position calls for. Any other environment gets 1 to `max_turns` calls with random valid
    arguments. Errors the environment returns become tool messages, as in TRL. Every episode ends with
    a short final answer. Each episode's reward is appended to `rewards` when it is given.
    """
    rng = random.Random(seed)
    conversations = []
    for row in rows:
        name = row.get("environment") if row.get("environment") in classes else next(iter(classes))
        environment = classes[name]()
        listing = _tool_schemas(environment)
        solver = solver_of((players or {}).get(name), seed)
        messages = [dict(message) for message in row["prompt"]]
        messages[-1]["content"] = messages[-1]["content"] + environment.reset(**row)
        episode = environment.episode
        assert episode is not None
        length = environment.metadata.get("episode_length")
        turns = 2 * (length if isinstance(length, int) else 10) if solver else rng.randint(1, max_turns)
        for _ in range(turns):
            if episode.done or episode.lost:
                break
            call = solver(episode.observation or {}, episode.row) if solver else None
            if solver is not None and call is None:
                break
            context_only = call is None or rng.random() >= scripted_share
            tool, arguments = _random_call(listing, rng) if context_only else call
            try:
                result: Any = getattr(environment, tool)(**arguments)
            except ValueError as error:
                result = {"error": str(error)}
            messages.extend(_call_turn(tool, arguments, result, context_only=context_only and solver is not None))
        if rewards is not None:
            rewards.append(episode.reward)
        environment._close()
        messages.append({"role": "assistant", "content": rng.choice(["Done.", "I am done.", "Finished."])})
        conversations.append((messages, listing))
    return conversations


def solver_of(env_class: type[Environment] | None, seed: int) -> Any:
    """The `solver` scripted player of a game's package as `act(observation, task) -> (tool, arguments)`; None
    when the environment declares no episode length (its episodes are no games to play to the end) or its
    package has no solver."""
    if env_class is None or not env_class.EPISODE_LENGTH:
        return None
    factory = tool_players(env_class).get("solver")
    return factory(seed) if factory is not None else None


def _random_call(listing: list[dict[str, Any]], rng: random.Random) -> tuple[str, dict[str, Any]]:
    tool = rng.choice(listing)["function"]
    properties = tool["parameters"].get("properties", {})
    required = set(tool["parameters"].get("required", ()))
    return tool["name"], {name: sample_argument(schema, rng) for name, schema in properties.items()
                          if name in required or rng.random() < 0.5}


#: Marks an assistant turn the warm-up shows the model but does not train it on (a random move among scripted ones).
CONTEXT_ONLY = "context_only"


def _call_turn(name: str, arguments: dict[str, Any], result: Any, *, context_only: bool = False
               ) -> list[dict[str, Any]]:
    """The assistant's tool call and the tool's reply, as TRL puts them in the conversation."""
    call: dict[str, Any] = {"role": "assistant", "content": "",
                            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]}
    if context_only:
        call[CONTEXT_ONLY] = True
    return [call, {"role": "tool", "name": name, "content": str(result)}]


def chat_api_tools(listing: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool schemas as an OpenAI-compatible server renders them: TRL renders `get_json_schema`'s, whose functions
    also carry a `return` description; vLLM's server drops every field the chat API does not define."""
    return [{**tool, "function": {key: value for key, value in tool["function"].items()
                                  if key in CHAT_API_FUNCTION_FIELDS}} for tool in listing]


def _with_chat_api_tools(conversations: list[Conversation]) -> list[Conversation]:
    """The conversations, and each again with its tools in the chat API's form (`chat_api_tools`)."""
    return [*conversations, *((messages, chat_api_tools(listing)) for messages, listing in conversations)]


def _train_tokenizer(texts: list[str], spec: TinyModelSpec) -> Any:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_chat_template

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=spec.vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # The tags are whole tokens (as in Qwen3) but not "special": decoding keeps them, so TRL can parse tool calls.
    backend.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAG_TOKENS])
    backend.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        padding_side="left", model_max_length=4096)
    tokenizer.chat_template = qwen3_chat_template
    return tokenizer


def _training_template(tokenizer: Any) -> str:
    """The template TRL renders multi-turn episodes with (a prefix-preserving one with generation markers)."""
    from trl.chat_template_utils import get_training_chat_template

    return get_training_chat_template(tokenizer) or tokenizer.chat_template


def build_tiny_model(classes: Mapping[str, type[ServedEnvironment]], rows: Sequence[dict[str, Any]],
                     spec: TinyModelSpec | None = None, save_to: Path | None = None,
                     players: Mapping[str, type[Environment]] | None = None) -> tuple[Any, Any, dict[str, float]]:
    """Build, warm up and return `(model, tokenizer, figures)`; optionally save both to `save_to`.

    `rows` are dataset rows (with `prompt`, and `environment` when several environments are bound);
    one scripted episode is played per row, cycling through them. `players` are the classes of the
    environments served in this process, by name: those with a scripted player are warmed up on whole
    episodes (see `scripted_conversations`). `figures["episode_tokens"]` is the longest warm-up
    episode in tokens, everything after the prompt (what TRL's `max_completion_length` bounds);
    `figures["warmup_rewarded_share"]` the share of warm-up episodes that earned a reward.
    """
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    spec = spec or TinyModelSpec()
    started = time.perf_counter()
    torch.manual_seed(spec.seed)
    rewards: list[float] = []
    conversations = scripted_conversations(classes, warmup_rows(rows, spec, players), max_turns=spec.max_turns,
                                           seed=spec.seed, players=players, scripted_share=spec.scripted_share,
                                           rewards=rewards)
    if spec.chat_api_tools:
        conversations = _with_chat_api_tools(conversations)
    played = time.perf_counter()

    from transformers.utils.chat_template_utils import render_jinja_template
    from trl.chat_template_utils import qwen3_chat_template

    texts = []
    for tools in {json.dumps(tools): tools for _, tools in conversations}.values():  # one render call per tool set
        group = [messages for messages, listing in conversations if listing == tools]
        rendered, _ = render_jinja_template(group, tools=tools, chat_template=qwen3_chat_template,
                                            **CHAT_TEMPLATE_KWARGS)
        texts.extend(rendered)
    tokenizer = _train_tokenizer(texts, spec)
    template = _training_template(tokenizer)
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=spec.hidden_size,
                         intermediate_size=spec.intermediate_size, num_hidden_layers=spec.num_layers,
                         num_attention_heads=spec.num_heads, num_key_value_heads=spec.num_kv_heads,
                         head_dim=spec.head_dim, max_position_embeddings=4096, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id

    batch = _encode(tokenizer, template, conversations)
    loss = _warm_up(model, batch, spec)
    model.eval()
    figures = {"parameters": float(sum(p.numel() for p in model.parameters())), "warmup_loss": loss,
               "episode_tokens": float(_longest_episode(batch)),
               "warmup_rewarded_share": sum(reward != 0 for reward in rewards) / max(1, len(rewards)),
               "vocab_size": float(len(tokenizer)), "play_seconds": played - started,
               "build_seconds": time.perf_counter() - started}
    if save_to is not None:
        save_to.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(save_to)
        tokenizer.save_pretrained(save_to)
    return model, tokenizer, figures


def warmup_rows(rows: Sequence[dict[str, Any]], spec: TinyModelSpec,
                players: Mapping[str, type[Environment]] | None = None) -> list[dict[str, Any]]:
    """The rows the warm-up plays, one scripted episode each: the first `spec.game_episodes` rows when an
    environment in `players` has a scripted solver, else the first `spec.episodes`, cycling through `rows`."""
    games = any(solver_of(env_class, spec.seed) is not None for env_class in (players or {}).values())
    return [rows[index % len(rows)] for index in range(spec.game_episodes if games else spec.episodes)]


def _encode(tokenizer: Any, template: str, conversations: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]
            ) -> dict[str, Any]:
    """Token ids and an assistant-turns-only loss mask for each conversation, right-padded."""
    import torch

    encoded = [tokenizer.apply_chat_template(messages, tools=tools, chat_template=template, return_dict=True,
                                             return_assistant_tokens_mask=True, tokenize=True, **CHAT_TEMPLATE_KWARGS)
               for messages, tools in conversations]
    for item, (messages, _) in zip(encoded, conversations, strict=True):
        _untrain_context_turns(item["assistant_masks"], messages)
    width = max(len(item["input_ids"]) for item in encoded)
    ids = torch.full((len(encoded), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(encoded), width), -100, dtype=torch.long)
    attention = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, item in enumerate(encoded):
        tokens = torch.tensor(item["input_ids"])
        mask = torch.tensor(item["assistant_masks"], dtype=torch.bool)
        ids[row, : len(tokens)] = tokens
        attention[row, : len(tokens)] = 1
        labels[row, : len(tokens)] = torch.where(mask, tokens, torch.full_like(tokens, -100))
    return {"input_ids": ids, "attention_mask": attention, "labels": labels}


def _untrain_context_turns(mask: list[int], messages: list[dict[str, Any]]) -> None:
    """Clear the assistant-turns mask (in place) over the turns marked `CONTEXT_ONLY`; its runs of 1 are the
    assistant turns, in order."""
    turns = [message.get(CONTEXT_ONLY, False) for message in messages if message["role"] == "assistant"]
    runs, start = [], None
    for index, value in enumerate([*mask, 0]):
        if value and start is None:
            start = index
        elif not value and start is not None:
            runs.append((start, index))
            start = None
    if len(runs) != len(turns):  # the template marked turns otherwise: leave its mask as it is rather than guess
        return
    for (start, end), context_only in zip(runs, turns, strict=True):
        if context_only:
            mask[start:end] = [0] * (end - start)


def _longest_episode(batch: dict[str, Any]) -> int:
    """Tokens from each conversation's first assistant token to its end, at most."""
    longest = 0
    for labels, attention in zip(batch["labels"], batch["attention_mask"], strict=True):
        trained = (labels != -100).nonzero()
        if len(trained):
            longest = max(longest, int(attention.sum()) - int(trained[0]))
    return longest


def _mini_batches(batch: dict[str, Any], size: int, seed: int) -> Iterator[dict[str, Any]]:
    """Endless mini-batches of `size` conversations, reshuffled after each pass, each cut to its longest; the
    whole batch every time when it holds no more than `size`."""
    count = len(batch["input_ids"])
    if count <= size:
        while True:
            yield batch
    rng = random.Random(seed)
    order = list(range(count))
    while True:
        rng.shuffle(order)
        for start in range(0, count - size + 1, size):
            chosen = order[start: start + size]
            width = int(batch["attention_mask"][chosen].sum(dim=1).max())
            yield {key: value[chosen, :width] for key, value in batch.items()}


def _warm_up(model: Any, batch: dict[str, Any], spec: TinyModelSpec) -> float:
    import torch

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.warmup_lr)
    loss_value = float("nan")
    batches = _mini_batches(batch, spec.warmup_batch_size, spec.seed)
    for _ in range(spec.warmup_steps):
        optimizer.zero_grad()
        loss = model(**next(batches)).loss
        loss.backward()
        optimizer.step()
        loss_value = float(loss.item())
    return loss_value


def describe(figures: dict[str, float]) -> str:
    """One line about the built model, for the run log."""
    return (f"tiny model: {figures['parameters'] / 1000:.0f}K parameters, vocabulary {figures['vocab_size']:.0f}, "
            f"warm-up loss {figures['warmup_loss']:.2f}, built in {figures['build_seconds']:.1f}s")
