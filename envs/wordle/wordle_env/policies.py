"""Reference policies for Wordle: a scripted solver and a random guesser, plus a small evaluation.

A policy maps an observation to the next message (`"[crane]"`). It reads only the game text, so the
same policy plays a local `WordleEnvironment`, an `EnvClient` session, or an OpenEnv TextArena
server: pass the observation model, its wire dict, or the transcript string itself.

    from wordle_env.policies import Solver, play_episode
    result = play_episode(WordleEnvironment(), Solver(), seed=3)

Evaluate from the command line (seeds 0..N-1, one game each):

    python -m wordle_env.policies --games 500
    python -m wordle_env.policies --games 500 --policy random --json
    python -m wordle_env.policies --games 500 --words dictionary   # secrets drawn from all valid words
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any, Protocol

from .environment import WordleEnvironment
from .game import NUM_GUESSES, score_guess
from .models import WordleAction, WordleObservation
from .words import secret_words, valid_words

__all__ = ["Policy", "Solver", "RandomPolicy", "RandomLetters", "TOOL_PLAYERS", "EpisodeResult", "play_episode", "evaluate", "parse_history", "main"]

_FEEDBACK = re.compile(r"You submitted \[(\w+)\]\.\nFeedback:\n[^\n]*\n([GYX](?: [GYX])*)\n")
History = list[tuple[str, tuple[str, ...]]]


class Policy(Protocol):
    """Anything that picks the next message from an observation."""

    name: str

    def act(self, observation: WordleObservation | Mapping[str, Any] | str) -> str:
        """The next message to send, e.g. `"[crane]"`."""


def transcript_of(observation: WordleObservation | Mapping[str, Any] | str) -> str:
    """The game text of an observation model, an observation dict from the wire, or a string."""
    if isinstance(observation, str):
        return observation
    messages = observation.messages if isinstance(observation, WordleObservation) else observation.get("messages")
    if not messages:
        raise ValueError("the observation has no messages; pass a Wordle observation or its transcript text")
    first = messages[0]
    return first.content if hasattr(first, "content") else first["content"]


def parse_history(transcript: str) -> History:
    """Every scored guess in a transcript, in order: `[(word, ("G", "X", ...)), ...]`."""
    return [(word.lower(), tuple(row.split())) for word, row in _FEEDBACK.findall(transcript)]


def consistent(words: Iterable[str], history: History) -> list[str]:
    """The words that would have produced every feedback row in `history` had they been the secret."""
    return [word for word in words if all(score_guess(guess, word) == marks for guess, marks in history)]


def _entropy(probe: str, candidates: Sequence[str]) -> float:
    sizes = Counter(score_guess(probe, secret) for secret in candidates).values()
    total = len(candidates)
    return -sum(size / total * math.log2(size / total) for size in sizes)


def best_probe(probes: Iterable[str], candidates: Sequence[str]) -> str:
    """The probe whose feedback splits `candidates` most evenly (highest entropy).

    Ties go to a probe that could itself be the secret, then to the alphabetically first.
    """
    possible = set(candidates)
    return max(sorted(set(probes)), key=lambda probe: (round(_entropy(probe, candidates), 9), probe in possible))


@cache
def _opening_guess() -> str:
    return best_probe(secret_words(), secret_words())


class Solver:
    """Plays to win: keeps the secret words consistent with the feedback so far and guesses the word
    (among the secret words, or the whole dictionary once none fits) that splits them most evenly."""

    name = "solver"

    def act(self, observation: WordleObservation | Mapping[str, Any] | str) -> str:
        history = parse_history(transcript_of(observation))
        if not history:
            return f"[{_opening_guess()}]"
        candidates = consistent(secret_words(), history)
        probes: Sequence[str] = secret_words()
        if not candidates:
            candidates = consistent(valid_words(), history)
            # few candidates: any word may split them best; many: probing with them alone stays fast
            probes = valid_words() if len(candidates) <= 15 else candidates
        guessed = {word for word, _ in history}
        candidates = [word for word in candidates if word not in guessed]
        if not candidates:
            raise ValueError("no dictionary word fits this feedback; was the game played against another word list?")
        if len(candidates) <= 2:
            return f"[{candidates[0]}]"
        return f"[{best_probe((probe for probe in probes if probe not in guessed), candidates)}]"


class RandomPolicy:
    """Guesses a uniformly random dictionary word it has not guessed yet (a baseline)."""

    name = "random"

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed)

    def act(self, observation: WordleObservation | Mapping[str, Any] | str) -> str:
        guessed = {word for word, _ in parse_history(transcript_of(observation))}
        while True:
            word = self._rng.choice(valid_words())
            if word not in guessed:
                return f"[{word}]"


class RandomLetters:
    """Guesses five random letters in brackets: the right format, but hardly ever a word (a model that
    has not learnt the word list). Most games end on the second invalid guess."""

    name = "random-letters"

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed)

    def act(self, observation: WordleObservation | Mapping[str, Any] | str) -> str:
        return "[" + "".join(self._rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5)) + "]"


def _tool_player(policy: Policy) -> Any:
    def act(observation: Mapping[str, Any], task: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        return "guess", {"guess": policy.act(observation)}

    return act


#: Scripted players for `envkit eval --policy NAME`: each takes a seed and returns a function from the latest
#: observation (its wire dict) and the task to the next tool call, `(tool, arguments)`. `random` plays whole
#: games of random dictionary words (the baseline); `random-letters` mostly loses on two invalid guesses.
TOOL_PLAYERS = {
    "solver": lambda seed: _tool_player(Solver()),
    "random": lambda seed: _tool_player(RandomPolicy(seed)),
    "random-letters": lambda seed: _tool_player(RandomLetters(seed)),
}


@dataclass
class EpisodeResult:
    """How one game went."""

    secret: str
    won: bool
    guesses: int
    reward: float
    invalid_moves: int


def play_episode(env: WordleEnvironment, policy: Policy, *, seed: int | None = None,
                 word: str | None = None) -> EpisodeResult:
    """Play one game of a local `WordleEnvironment` to its end with `policy`."""
    observation = env.reset(seed=seed, word=word)
    while not observation.done:
        observation = env.step(WordleAction(message=policy.act(observation)))
    state = env.state
    components = state.reward_components
    return EpisodeResult(secret=state.raw_state["game_state"]["secret_word"], won=components["win"] == 1.0,
                         guesses=len(state.raw_state["game_state"]["guess_history"]), reward=float(observation.reward),
                         invalid_moves=int(components["invalid_moves"]))


@dataclass
class Evaluation:
    """A policy's results over seeded games."""

    policy: str
    words: str
    games: int
    first_seed: int
    wins: int
    win_rate: float
    mean_guesses_won: float | None
    mean_reward: float
    guess_distribution: dict[str, int]


def evaluate(policy: Policy, games: int, first_seed: int = 0, words: str = "secrets") -> Evaluation:
    """Play `games` games with seeds `first_seed, first_seed + 1, ...` and summarise them.

    `words="secrets"` lets each seed draw the secret as `reset(seed=...)` does; `words="dictionary"`
    draws it from every valid guess instead (seeded the same way) and pins it with `reset(word=...)`.
    """
    if games < 1:
        raise ValueError(f"games must be at least 1, got {games}")
    if words not in ("secrets", "dictionary"):
        raise ValueError(f'words must be "secrets" or "dictionary", got {words!r}')
    env = WordleEnvironment()
    seeds = range(first_seed, first_seed + games)
    if words == "secrets":
        results = [play_episode(env, policy, seed=seed) for seed in seeds]
    else:
        results = [play_episode(env, policy, word=random.Random(seed).choice(valid_words())) for seed in seeds]
    won = [result.guesses for result in results if result.won]
    distribution = Counter(str(result.guesses) if result.won else "lost" for result in results)
    order = [str(n) for n in range(1, NUM_GUESSES + 1)] + ["lost"]
    return Evaluation(policy=policy.name, words=words, games=games, first_seed=first_seed, wins=len(won),
                      win_rate=len(won) / games, mean_guesses_won=sum(won) / len(won) if won else None,
                      mean_reward=sum(result.reward for result in results) / games,
                      guess_distribution={key: distribution[key] for key in order if distribution[key]})


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: evaluate a reference policy over seeded games and print the figures."""
    parser = argparse.ArgumentParser(prog="python -m wordle_env.policies",
                                     description="Play seeded Wordle games with a reference policy and report "
                                                 "its win rate and mean guesses.",
                                     epilog="example: python -m wordle_env.policies --games 500 --policy solver")
    parser.add_argument("--games", type=int, default=500, help="games to play, one per seed (default 500)")
    parser.add_argument("--first-seed", type=int, default=0, help="seed of the first game (default 0)")
    parser.add_argument("--policy", choices=["solver", "random"], default="solver", help="policy to play")
    parser.add_argument("--policy-seed", type=int, default=0, help="seed of the random policy (default 0)")
    parser.add_argument("--words", choices=["secrets", "dictionary"], default="secrets",
                        help="draw secrets from the 140 secret words (default) or from every valid guess")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.games < 1:
        parser.error(f"--games must be at least 1, got {args.games}")
    policy: Policy = Solver() if args.policy == "solver" else RandomPolicy(args.policy_seed)
    result = evaluate(policy, args.games, args.first_seed, args.words)
    if args.json:
        print(json.dumps(asdict(result)))
        return 0
    last = result.first_seed + result.games - 1
    guesses = "-" if result.mean_guesses_won is None else f"{result.mean_guesses_won:.2f}"
    print(f"{result.policy}: {result.games} games (seeds {result.first_seed}-{last}, {result.words}): "
          f"won {result.wins} ({result.win_rate:.1%}), mean guesses {guesses} in won games, "
          f"mean reward {result.mean_reward:.3f}")
    print("guesses: " + ", ".join(f"{key}: {count}" for key, count in result.guess_distribution.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
