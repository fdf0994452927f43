"""Which games an evaluation plays (tasks of an environment's split, or rows of a dataset file), and playing them.

A game's prompt is built as `envkit train` builds its rows' prompts (the environment's `/metadata`
prompt or description, `envkit.play.tasks.task_prompt`). When the game starts, the bound environment's `reset`
text is appended to it, as TRL appends it: the task's own prompt (`Environment.task_prompt`, where the class is
known) and the first observation, as `envkit.opening_text` joins them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..environment import Environment, UnknownSplitError
from ..episode_metrics import Metric
from ..errors import ConfigurationError
from ..transcripts import Transcript, chat_message
from .binding import ServedEnvironment
from .loop import Conversation, Game, Player, play
from .table import Row, row_for
from .tasks import file_rows

__all__ = ["TaskSource", "split_games", "dataset_games", "waves", "play_and_score", "transcript_of"]

NOT_TASK = ("prompt", "environment")


class TaskSource(Protocol):
    """Where a split's tasks come from: an environment class, or the task lists a server publishes."""

    __name__: str

    def splits(self) -> list[str]: ...

    def tasks(self, split: str) -> Sequence[dict[str, Any]]: ...


def split_games(env: str, env_class: type[Environment] | None, split: str, games: int | None,
                base_prompt: str, served: TaskSource | None = None) -> list[Game]:
    """The first `games` tasks of `split` (all of them when None), from the class or else from what the server
    publishes (`served`); raises `ConfigurationError` saying what exists."""
    source: TaskSource | None = env_class if env_class is not None else served
    if source is None:
        raise ConfigurationError(f"{env}: the server publishes no task splits; name its class with --env "
                                 "(a bundled env, an env folder or module:Class) beside --env-url, or give --dataset")
    try:
        tasks = source.tasks(split)
    except UnknownSplitError:
        known = ", ".join(source.splits()) or (f'none: declare {source.__name__}.TASKS = {{"test": [...]}} (each '
                                               "task the keyword arguments of one reset), or give --dataset "
                                               "rows.jsonl")
        raise ConfigurationError(f"{env} has no split {split!r}; its splits: {known}") from None
    if not tasks:
        raise ConfigurationError(f"{env} split {split!r} has no tasks; choose another --split or give --dataset")
    count = len(tasks) if games is None else games
    if count > len(tasks):
        raise ConfigurationError(f"--games {count}: {env} split {split!r} has only {len(tasks)} tasks; ask for "
                                 f"{len(tasks)} or fewer, or give --dataset")
    return [Game(env, dict(tasks[index]), [{"role": "user", "content": base_prompt}], split, index)
            for index in range(count)]


def dataset_games(path: str, base_prompts: Mapping[str, str], games: int | None) -> list[Game]:
    """Games from a JSONL or CSV file, one per row: its columns but `prompt` and `environment` reach `reset`; a row
    without a prompt gets the environment's (as in `envkit train --dataset`)."""
    rows = file_rows(path, base_prompts)
    if games is not None:
        if games > len(rows):
            raise ConfigurationError(f"--games {games}: --dataset {path} has only {len(rows)} rows")
        rows = rows[:games]
    names = list(base_prompts)
    chosen = []
    for row in rows:
        env = row.get("environment", names[0])
        task = {key: value for key, value in row.items() if key not in NOT_TASK}
        chosen.append(Game(env, task, row["prompt"]))
    return chosen


def transcript_of(label: str, conversation: Conversation, **extra: Any) -> Transcript:
    """One played game in the transcript format."""
    game, episode = conversation.game, conversation.episode
    details: dict[str, Any] = {"session_id": episode.session_id, **extra}
    if episode.lost:
        details["lost_reason"] = episode.lost
    messages = [chat_message(message) for message in conversation.messages]
    ending = next((index for index, turn in enumerate(episode.turns) if turn.done), None)
    answers = [message for message in messages if message["role"] == "tool"]
    if ending is not None and ending < len(answers):   # the k-th tool message answers the k-th call
        answers[ending]["ended_episode"] = True
    return Transcript(model=label, env=game.env, task=dict(game.task), messages=messages,
                      turns=list(episode.turns), reward=episode.reward, done=episode.done,
                      lost=episode.lost is not None, metrics=dict(episode.metrics), split=game.split,
                      task_index=game.task_index, extra=details)


def waves(games: Sequence[Game], slots: Mapping[str, int]) -> list[list[Game]]:
    """`games` in turns that hold at most `slots[env]` games of each environment, in the order given."""
    left, turns = list(games), []
    while left:
        taken: dict[str, int] = {}
        turn, rest = [], []
        for game in left:
            room = taken.get(game.env, 0) < slots.get(game.env, len(games))
            (turn if room else rest).append(game)
            taken[game.env] = taken.get(game.env, 0) + room
        turns.append(turn)
        left = rest
    return turns


def play_and_score(player: Player, games: Sequence[Game], classes: Mapping[str, type[ServedEnvironment]],
                   metrics: Mapping[str, Sequence[Metric]], *, max_tool_calling_iterations: int,
                   slots: Mapping[str, int] | None = None, ready: Callable[[list[Game]], None] | None = None,
                   say: Callable[[str], None] | None = None) -> tuple[list[Row], list[Transcript]]:
    """Play `games` with `player` and return a row per environment and a transcript per game.

    With `slots`, at most `slots[env]` games of an environment play at once: turn after turn, `ready` called before
    each (to wait for the servers' room) and `say` told the games played after each.
    """
    turns = waves(games, slots) if slots else [list(games)]
    conversations: list[Conversation] = []
    for turn in turns:
        if ready is not None:
            ready(turn)
        conversations += play(player, turn, dict(classes), max_tool_calling_iterations=max_tool_calling_iterations)
        if say is not None and len(turns) > 1:
            say(f"played {len(conversations)} of {len(games)} games")
    place = {id(game): index for index, game in enumerate(games)}
    conversations.sort(key=lambda conversation: place[id(conversation.game)])
    rows = []
    for env in dict.fromkeys(game.env for game in games):
        chosen = [conversation for conversation in conversations if conversation.game.env == env]
        rows.append(row_for(player.label, env, chosen, metrics.get(env, ())))
    return rows, [transcript_of(player.label, conversation) for conversation in conversations]
