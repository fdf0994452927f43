"""Transcripts of training episodes: a sample of each logged step's episodes, in `OUTPUT_DIR/transcripts.jsonl`.

The first reward function hands every scored batch to `EpisodeSampler.observe` (the prompts, the
completions as TRL parsed them, and the environment instances); at each logging step the sampler
appends up to `per_step` of that batch's episodes (spread over the batch, so over prompt groups) as
transcripts in the format `envkit eval --transcripts` writes, with the training `step` added.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ..transcripts import Transcript, chat_message, write_transcripts

__all__ = ["EpisodeSampler"]


class EpisodeSampler(TrainerCallback):
    """Keeps the latest scored batch and writes a sample of it at every log."""

    def __init__(self, path: Path, model: str, per_step: int) -> None:
        self.path = path
        self.model = model
        self.per_step = per_step
        self._batch: list[tuple[list[dict[str, Any]], Any]] = []
        self.written = 0

    def observe(self, kwargs: dict[str, Any]) -> None:
        """Called with a reward function's keyword arguments; keeps the chats and the episodes they played."""
        prompts, completions = kwargs.get("prompts") or [], kwargs.get("completions") or []
        environments = kwargs.get("environments") or [None] * len(prompts)
        self._batch = [([*prompt, *completion], getattr(environment, "episode", None))
                       for prompt, completion, environment in zip(prompts, completions, environments, strict=False)
                       if isinstance(prompt, list) and isinstance(completion, list)]

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not self._batch or self.per_step < 1:
            return
        batch, self._batch = self._batch, []
        stride = max(1, len(batch) // self.per_step)
        chosen = batch[::stride][: self.per_step]
        write_transcripts(self.path, (self._transcript(messages, episode, state.global_step)
                                      for messages, episode in chosen), append=True)
        self.written += len(chosen)

    def _transcript(self, messages: list[dict[str, Any]], episode: Any, step: int) -> Transcript:
        extra: dict[str, Any] = {"step": step}
        if episode is None:
            return Transcript(self.model, "", {}, [chat_message(m) for m in messages], [], 0.0, False, False,
                              extra=extra)
        extra["session_id"] = episode.session_id
        if episode.lost:
            extra["lost_reason"] = episode.lost
        return Transcript(model=self.model, env=episode.env, task=dict(episode.row),
                          messages=[chat_message(message) for message in messages], turns=list(episode.turns),
                          reward=episode.reward, done=episode.done, lost=episode.lost is not None,
                          metrics=dict(episode.metrics), extra=extra)
