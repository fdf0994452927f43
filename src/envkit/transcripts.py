"""Episode transcripts: one game per JSON line, written by `envkit eval` and `envkit train`, read by the replay view.

    {"format": "envkit.transcript/1", "model": "tiny", "env": "wordle", "split": "test", "task_index": 3,
     "task": {"secret_index": 12},
     "messages": [{"role": "user", "content": "..."},
                  {"role": "assistant", "content": "", "tool_calls": [{"name": "guess", "arguments": {...}}]},
                  {"role": "tool", "name": "guess", "content": "..."}],
     "turns": [{"tool": "guess", "arguments": {...}, "result": "...", "reward": 0.0, "done": false, "error": null}],
     "reward": 1.0, "done": true, "lost": false, "metrics": {"won": 1, "guesses": 4, "invalid_guesses": 0}}

`messages` is the chat exactly as the model saw and produced it; `turns` has one entry per tool call,
in order. In `envkit eval`'s transcripts the tool message whose call ended the episode carries
`"ended_episode": true`: calls after it were answered by an episode that was over. `split` and `task_index` are
null for games from a dataset file or seeds. Writers may add fields (`step` in training, `session_id`,
`lost_reason`); readers keep the ones they do not know in `Transcript.extra`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "Turn", "Transcript", "TranscriptError", "chat_message", "json_objects", "write_transcripts",
           "read_transcripts", "iter_transcripts"]

FORMAT = "envkit.transcript/1"


class TranscriptError(ValueError):
    """A transcript file or line that does not follow the format."""


@dataclass
class Turn:
    """One tool call: what was called, what the model read back, and the reward and state after it."""

    tool: str
    arguments: Any
    result: str
    reward: float | None = None
    done: bool = False
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "arguments": self.arguments, "result": self.result, "reward": self.reward,
                "done": self.done, "error": self.error}


@dataclass
class Transcript:
    """One game, as one line of a transcript file."""

    model: str
    env: str
    task: dict[str, Any]
    messages: list[dict[str, Any]]
    turns: list[Turn]
    reward: float
    done: bool
    lost: bool
    metrics: dict[str, Any] = field(default_factory=dict)
    split: str | None = None
    task_index: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The line's JSON object (format fields first, then the extra ones)."""
        return {"format": FORMAT, "model": self.model, "env": self.env, "split": self.split,
                "task_index": self.task_index, "task": self.task, "messages": self.messages,
                "turns": [turn.to_json() for turn in self.turns], "reward": self.reward, "done": self.done,
                "lost": self.lost, "metrics": self.metrics, **self.extra}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Transcript:
        """Read one line's object; raises `TranscriptError` for what is not a transcript of this format."""
        if data.get("format") != FORMAT:
            raise TranscriptError(f"not an {FORMAT} line (format {data.get('format')!r})")
        missing = [key for key in ("model", "env", "task", "messages", "turns", "reward", "done", "lost")
                   if key not in data]
        if missing:
            raise TranscriptError(f"missing {', '.join(missing)}")
        turns = data["turns"]
        if not isinstance(data["messages"], list) or not isinstance(turns, list):
            raise TranscriptError("messages and turns must be lists")
        known = {"format", "model", "env", "split", "task_index", "task", "messages", "turns", "reward", "done",
                 "lost", "metrics"}
        try:
            parsed_turns = [Turn(turn["tool"], turn.get("arguments"), turn.get("result", ""), turn.get("reward"),
                                 bool(turn.get("done", False)), turn.get("error")) for turn in turns]
        except (TypeError, KeyError):
            raise TranscriptError("each turn needs at least a tool name") from None
        return cls(model=str(data["model"]), env=str(data["env"]), task=dict(data["task"] or {}),
                   messages=list(data["messages"]), turns=parsed_turns, reward=float(data["reward"]),
                   done=bool(data["done"]), lost=bool(data["lost"]), metrics=dict(data.get("metrics") or {}),
                   split=data.get("split"), task_index=data.get("task_index"),
                   extra={key: value for key, value in data.items() if key not in known})


def chat_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A chat message in transcript form: role and content, tool calls as `{"name", "arguments"}`.

    Accepts the shapes chat templates and OpenAI-compatible servers use
    (`{"type": "function", "function": {"name", "arguments"}}`, arguments as an object or JSON text).
    """
    content = message.get("content")
    out: dict[str, Any] = {"role": message.get("role", "assistant"),
                           "content": content if isinstance(content, str) else json.dumps(content)
                           if content is not None else ""}
    if message.get("name") and out["role"] == "tool":
        out["name"] = message["name"]
    calls = message.get("tool_calls")
    if calls:
        out["tool_calls"] = [_tool_call(call) for call in calls]
    if message.get("error"):
        out["error"] = str(message["error"])  # a turn the model's server could not answer
    return out


def _tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call.get("function", call)
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass  # kept as the text the model wrote
    return {"name": function.get("name"), "arguments": arguments}


def write_transcripts(path: str | Path, transcripts: Iterable[Transcript], *, append: bool = False) -> Path:
    """Write (or append) one JSON line per transcript; creates the folder. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w") as handle:
        for transcript in transcripts:
            handle.write(json.dumps(transcript.to_json(), ensure_ascii=False, default=str) + "\n")
    return path


def json_objects(lines: Iterable[str], where: str, error: type[Exception]) -> Iterator[tuple[int, dict[str, Any]]]:
    """`(line number, object)` for each non-blank line of a JSON-lines file; `error` names `where` and the line of
    one that is not a JSON object."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as problem:
            raise error(f"{where}, line {number}: not JSON ({problem.msg})") from None
        if not isinstance(data, dict):
            raise error(f"{where}, line {number}: expected a JSON object per line")
        yield number, data


def iter_transcripts(path: str | Path) -> Iterator[Transcript]:
    """The transcripts of a file, in order; raises `TranscriptError` naming the line that is wrong."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        raise TranscriptError(f"{path}: cannot read it ({error.strerror})") from None
    for number, data in json_objects(lines, str(path), TranscriptError):
        try:
            yield Transcript.from_json(data)
        except TranscriptError as error:
            raise TranscriptError(f"{path}, line {number}: {error}") from None


def read_transcripts(path: str | Path) -> list[Transcript]:
    """Every transcript of a file (see `iter_transcripts`)."""
    return list(iter_transcripts(path))
