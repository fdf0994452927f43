"""The Wordle environment: TextArena's `Wordle-v0` game behind OpenEnv's TextArena wire format."""

from __future__ import annotations

import random
import uuid
from typing import Any

from envkit import Environment, Metric, tool

from .game import GAME_ID, NUM_GUESSES, PLAYER_ID, WORD_LENGTH, WordleGame
from .models import WordleAction, WordleMessage, WordleObservation, WordleState
from .rewards import RewardSignals, reward_components
from .words import is_valid_guess, secret_words, split_indices

__all__ = ["ENV_ID", "WordleEnvironment"]

#: The game's name on the wire, as OpenEnv's TextArena server reports it.
ENV_ID = "Wordle-v0"


class WordleEnvironment(Environment[WordleAction, WordleObservation, WordleState]):
    """Five letters, six guesses, TextArena's rules, text and rewards; word lists shipped, no downloads.

    `reset(seed=...)` draws the secret reproducibly from the 140 Basic English nouns;
    `reset(word="crane")` sets it outright (any word of the guess dictionary), and
    `reset(secret_index=i)` picks secret noun number i (what the `train` and `test` tasks name, so a
    task never shows its answer). Actions are messages such as `{"message": "[crane]"}`; LLM agents
    call the `guess` tool instead.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUN_INLINE = True
    #: Six guesses at most (an invalid move costs no guess, and a second one in a row ends the game); reward 0 to 1.
    EPISODE_LENGTH = NUM_GUESSES
    REWARD_RANGE = (0.0, 1.0)
    #: `envkit train` trains on `played` (see `reward_components`): a game ended by invalid guesses earns nothing.
    TRAIN_REWARDS = ("played",)
    #: Disjoint splits of the secret nouns, by index: every fourth noun is a test word (35), the rest train (105).
    TASKS = {split: tuple({"secret_index": index} for index in indices) for split, indices in split_indices().items()}
    #: The columns of TRL's Wordle evaluation table: wins (k/n), guesses per win, invalid guesses (total).
    METRICS = (
        Metric("won", "wins", "count", success=True, description="the secret word was guessed"),
        Metric("guesses", "guesses per win", "mean", where="won", description="valid guesses made in a won game"),
        Metric("invalid_guesses", "invalid guesses", "sum",
               description="guesses refused as invalid (wrong format, not a word, repeated), over all games"),
    )

    def __init__(self) -> None:
        self._game: WordleGame | None = None
        self._shown = 0
        self._signals = RewardSignals()
        self._episode_id: str | None = None
        self._step_count = 0
        self._last_reward = 0.0
        self._last_info: dict[str, Any] = {}

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              word: str | None = None, secret_index: int | None = None) -> WordleObservation:
        """Start a game; `seed` picks the secret reproducibly, `word` sets it, `secret_index` names a secret noun."""
        self._game = WordleGame(secret=_secret(seed, word, secret_index), is_word=is_valid_guess)
        self._shown = 0
        self._signals = RewardSignals()
        self._episode_id = episode_id if episode_id is not None else str(uuid.uuid4())
        self._step_count = 0
        self._last_reward, self._last_info = 0.0, {}
        return self._observation(info={})

    def step(self, action: WordleAction) -> WordleObservation:
        """Play one message; raises `GameOverError` (a `ValueError`) once the game has ended."""
        game = self._require_game()
        game.play(action.message)
        self._step_count += 1
        reward = game.reward or 0.0
        signals = self._signals.compute(action.message, game.render(), reward)
        self._last_reward, self._last_info = reward, {"reward_signals": signals}
        return self._observation(info={"reward_signals": signals})

    @property
    def state(self) -> WordleState:
        game = self._game
        if game is None:
            return WordleState()
        game_info: dict[str, Any] = {"role": "Player 0", "invalid_move": game.ended_by_invalid_move,
                                     "turn_count": game.turn}
        if game.end_reason is not None:
            game_info["reason"] = game.end_reason
        history = [[word, list(marks)] for word, marks in game.guesses]
        game_state: dict[str, Any] = {"guess_history": history, "word_length": WORD_LENGTH, "num_guesses": NUM_GUESSES}
        if game.done:  # TextArena's state holds the secret throughout; here a client reads it only once it is no secret
            game_state = {"secret_word": game.secret, **game_state}
        raw_state = {
            "turn": game.turn,
            "game_state": game_state,
            "logs": [[GAME_ID, text] for text in game.transcript],
            "rewards": None if game.reward is None else {str(PLAYER_ID): game.reward},
            "done": game.done,
            "role_mapping": {str(PLAYER_ID): "Player", str(GAME_ID): "GAME"},
            "game_info": {str(PLAYER_ID): game_info},
            "step_info": {},
        }
        return WordleState(episode_id=self._episode_id, step_count=self._step_count, turn=game.turn,
                           last_reward=self._last_reward, last_info=self._last_info, raw_state=raw_state,
                           reward_components=reward_components(game))

    def episode_metrics(self) -> dict[str, float]:
        """Won (1 or 0), valid guesses made, and invalid guesses made in the current game."""
        game = self._game
        if game is None:
            return {"won": 0, "guesses": 0, "invalid_guesses": 0}
        return {"won": int(game.won), "guesses": len(game.guesses), "invalid_guesses": game.invalid_moves}

    @tool
    def guess(self, guess: str) -> WordleObservation:
        """Guess the secret five-letter word. You have six guesses; two invalid guesses in a row end the game.

        Args:
            guess: The guessed word in square brackets, for example "[crane]".

        Returns:
            The game's reply to this guess only: the word spelled out over a row of G (right letter, right
            place), Y (in the word, elsewhere) and X (not in the word), and the guesses left; or why the
            guess was invalid.
        """
        return self.step(WordleAction(message=guess))

    @property
    def secret_word(self) -> str | None:
        """The current game's secret, for code in this process (clients see it in `state` only once the game is over)."""
        return None if self._game is None else self._game.secret

    def _require_game(self) -> WordleGame:
        if self._game is None:
            raise RuntimeError("no game in progress: call reset() before step()")
        return self._game

    def _observation(self, info: dict[str, Any]) -> WordleObservation:
        game = self._require_game()
        transcript = game.render()
        new_text, self._shown = transcript[self._shown:], len(transcript)
        message = WordleMessage(sender_id=GAME_ID, content=transcript, category="MESSAGE")
        metadata: dict[str, Any] = {"env_id": ENV_ID, "turn": game.turn, "raw_messages": [message.model_dump()]}
        if "reward_signals" in info:
            metadata["reward_signals"] = dict(info["reward_signals"])
        return WordleObservation(
            prompt=transcript.strip() if game.turn == 0 else ENV_ID,
            messages=[message], current_player_id=PLAYER_ID, legal_players=[PLAYER_ID], info=info,
            metadata=metadata, feedback=new_text, guesses_left=game.guesses_left,
            reward_components=reward_components(game), outcome=_outcome(game), reward=game.reward or 0.0,
            done=game.done,
        )


def _outcome(game: WordleGame) -> str:
    """How the game ended, in TextArena's words with the verdict first; empty while it runs."""
    if not game.done:
        return ""
    if game.won:
        return f"You won! {game.end_reason} Reward: {game.reward:g}."
    if game.ended_by_invalid_move:
        return (f"You lost: two invalid moves in a row end the game. {game.end_reason} The secret word was: "
                f"**{game.secret}**. Reward: {game.reward:g}.")
    return f"You lost. {game.end_reason} Reward: {game.reward:g}."


def _secret(seed: int | None, word: str | None, secret_index: int | None) -> str:
    if secret_index is not None:
        nouns = secret_words()
        if isinstance(secret_index, bool) or not isinstance(secret_index, int) or not 0 <= secret_index < len(nouns):
            raise ValueError(f"secret_index={secret_index!r} names no secret noun: give a whole number from 0 to "
                             f"{len(nouns) - 1}")
        return nouns[secret_index]
    if word is not None:
        if not isinstance(word, str) or not is_valid_guess(word):
            raise ValueError(f"word={word!r} cannot be the secret: give a five-letter English word from the guess "
                             "dictionary (e.g. 'crane'), or leave it out to draw one")
        return word.lower()
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"seed={seed!r} is not an integer: give an int (the same seed draws the same secret) or none")
    return random.Random(seed).choice(secret_words())
