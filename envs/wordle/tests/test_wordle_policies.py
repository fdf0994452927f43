"""The reference policies: the solver wins, the random policy guesses fresh valid words, the command reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from wordle_env import WordleAction, WordleEnvironment
from wordle_env.policies import RandomPolicy, Solver, evaluate, parse_history, play_episode, transcript_of
from wordle_env.words import valid_words

ENV_DIR = Path(__file__).resolve().parents[1]


def test_solver_wins_seeded_games_within_six_guesses() -> None:
    result = evaluate(Solver(), games=60)
    assert result.wins == 60 and result.win_rate == 1.0
    assert result.mean_guesses_won is not None and result.mean_guesses_won < 4
    assert sum(result.guess_distribution.values()) == 60 and "lost" not in result.guess_distribution


@pytest.mark.parametrize("word", ["abbey", "geese", "jazzy", "fuzzy", "erase"])
def test_solver_also_finds_words_outside_the_secret_list(word: str) -> None:
    result = play_episode(WordleEnvironment(), Solver(), word=word)
    assert result.secret == word and result.won and result.guesses <= 6 and result.invalid_moves == 0


def test_solver_is_deterministic() -> None:
    env = WordleEnvironment()
    first = play_episode(env, Solver(), seed=9)
    assert play_episode(env, Solver(), seed=9) == first


def test_random_policy_guesses_new_dictionary_words_reproducibly() -> None:
    env = WordleEnvironment()
    policy, guesses = RandomPolicy(seed=4), []
    observation = env.reset(word="speed")
    while not observation.done:
        guesses.append(policy.act(observation))
        observation = env.step(WordleAction(message=guesses[-1]))
    words = [guess.strip("[]") for guess in guesses]
    assert len(words) == len(set(words)) and set(words) <= set(valid_words())
    assert env.state.reward_components["invalid_moves"] == 0.0
    assert RandomPolicy(seed=4).act("\n[GAME] start") == guesses[0]


def test_history_is_read_from_models_wire_dicts_and_text() -> None:
    env = WordleEnvironment()
    env.reset(word="speed")
    observation = env.step(WordleAction(message="[erase]"))
    expected = [("erase", ("Y", "X", "X", "Y", "Y"))]
    assert parse_history(transcript_of(observation)) == expected
    assert parse_history(transcript_of(observation.model_dump())) == expected
    assert parse_history(observation.messages[0].content) == expected
    with pytest.raises(ValueError, match="no messages"):
        transcript_of({"prompt": "Wordle-v0"})


def test_solver_says_when_no_word_fits_the_feedback() -> None:
    transcript = "You submitted [crane].\nFeedback:\nC R A N E\nG G G G X\nYou have 5 guesses left."
    contradiction = transcript + "\nYou submitted [crank].\nFeedback:\nC R A N K\nX X X X X\nYou have 4 guesses left."
    with pytest.raises(ValueError, match="no dictionary word fits this feedback"):
        Solver().act(contradiction)


def test_evaluate_refuses_zero_games_and_unknown_word_sources() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        evaluate(Solver(), games=0)
    with pytest.raises(ValueError, match='words must be "secrets" or "dictionary"'):
        evaluate(Solver(), games=1, words="nouns")


def test_evaluate_on_dictionary_words_pins_seeded_secrets() -> None:
    result = evaluate(Solver(), games=4, first_seed=2, words="dictionary")
    assert (result.words, result.games, result.wins) == ("dictionary", 4, 4)


def run_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wordle_env.policies", *args], cwd=ENV_DIR, capture_output=True,
                          text=True, timeout=120)


def test_command_prints_figures_and_json() -> None:
    text = run_command("--games", "20")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("solver: 20 games (seeds 0-19, secrets): won 20 (100.0%), mean guesses ")
    data = run_command("--games", "10", "--policy", "random", "--first-seed", "3", "--json")
    assert data.returncode == 0, data.stderr
    figures = json.loads(data.stdout)
    assert (figures["policy"], figures["games"], figures["first_seed"]) == ("random", 10, 3)
    assert sum(figures["guess_distribution"].values()) == 10


def test_command_usage_errors_exit_2() -> None:
    done = run_command("--games", "0")
    assert done.returncode == 2 and "--games must be at least 1" in done.stderr
