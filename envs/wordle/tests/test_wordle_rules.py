"""Wordle's rules and game text, written out by hand, and checked against TextArena 0.7.4's own transcripts."""

from __future__ import annotations

import random
from typing import Any

import pytest
from wordle_env.game import GameOverError, WordleGame, partial_score, prompt_text, score_guess
from wordle_env.words import is_valid_guess, secret_words, valid_words

WARNING_TAIL = " Please resubmit a valid move and remember to follow the game rules to avoid penalties."


def new_game(secret: str) -> WordleGame:
    return WordleGame(secret=secret, is_word=is_valid_guess)


@pytest.mark.parametrize(("guess", "secret", "marks"), [
    ("speed", "erase", "Y X Y Y X"),    # two e's in both; s only once
    ("erase", "speed", "Y X X Y Y"),
    ("geese", "speed", "X Y G Y X"),    # the green e is taken first, so only one more e can be yellow
    ("speed", "geese", "Y X G Y X"),    # s and one e are elsewhere in geese; d is not
    ("abbey", "babes", "Y Y G G X"),    # greens b,e first; then a and the first b are yellow
    ("babes", "abbey", "Y Y G G X"),
    ("eerie", "erase", "G X Y X G"),    # both e's of erase are green, so the middle e is grey
    ("lever", "level", "G G G G X"),
    ("crane", "crane", "G G G G G"),
    ("ghost", "crane", "X X X X X"),
    ("kebab", "blade", "X Y Y Y X"),    # one b in blade: the first b of kebab takes it
])
def test_feedback_assigns_greens_first_then_yellows_left_to_right(guess: str, secret: str, marks: str) -> None:
    assert " ".join(score_guess(guess, secret)) == marks


def test_partial_score_counts_a_yellow_as_half_a_green() -> None:
    assert partial_score(("G", "Y", "X", "X", "Y")) == pytest.approx(0.4)
    assert partial_score(("X",) * 5) == 0.0 and partial_score(None) == 0.0


def test_prompt_wording() -> None:
    assert prompt_text() == (
        "You are Playing Wordle.\n"
        "A secret 5-letter word has been chosen. You have 6 attempts to guess it.\n"
        "For each guess, wrap your word in square brackets (e.g., '[apple]').\n"
        "Feedback for each letter will be given as follows:\n"
        "  - G (green): correct letter in the correct position\n"
        "  - Y (yellow): letter exists in the word but in the wrong position\n"
        "  - X (wrong): letter is not in the word\n"
        "Enter your guess to begin.\n")
    assert new_game("crane").render() == "\n[GAME] " + prompt_text()


def test_valid_guess_renders_letters_over_marks_and_guesses_left() -> None:
    game = new_game("speed")
    game.play("I will try [Geese] now")
    assert game.render().endswith("\n[GAME] I will try [Geese] now\n[GAME] You submitted [geese].\nFeedback:\n"
                                  "G E E S E\nX Y G Y X\nYou have 5 guesses left.")
    assert (game.turn, game.done, game.reward, game.guesses_left) == (1, False, None, 5)


def test_a_message_without_any_bracket_is_bracketed_whole() -> None:
    game = new_game("speed")
    game.play("erase")
    assert game.transcript[1] == "[erase]" and game.guesses == [("erase", tuple("YXXYY"))]
    game.play("crane is my guess")
    assert game.transcript[3] == "[crane is my guess]"
    assert game.transcript[4].startswith("You attempted an invalid move. Reason: You tried submitting a word in the "
                                         "wrong format.")


@pytest.mark.parametrize(("message", "reason"), [
    ("[crane", "You tried submitting a word in the wrong format. Please make sure to use squared brackets."),
    ("[cr ane]", "You tried submitting a word in the wrong format. Please make sure to use squared brackets."),
    ("[]", "You tried submitting a word in the wrong format. Please make sure to use squared brackets."),
    ("[cat]", "Your word must be exactly 5 letters."),
    ("[cranes]", "Your word must be exactly 5 letters."),
    ("[Player] [crane]", "Your word must be exactly 5 letters."),   # the first [word] counts: "Player"
    ("[xyzzy]", "'xyzzy' is not an English word."),
    ("[12345]", "'12345' is not an English word."),
])
def test_each_invalid_move_is_warned_once_and_no_guess_is_used(message: str, reason: str) -> None:
    game = new_game("speed")
    game.play(message)
    assert game.transcript[-1] == f"You attempted an invalid move. Reason: {reason}{WARNING_TAIL}"
    assert (game.turn, game.done, game.reward, game.guesses_left, game.invalid_moves) == (0, False, None, 6, 1)


def test_repeated_word_is_invalid() -> None:
    game = new_game("speed")
    game.play("[crane]")
    game.play("[CRANE]")
    assert game.transcript[-1] == ("You attempted an invalid move. Reason: You have already guessed 'crane' before. "
                                   f"Please try a different word.{WARNING_TAIL}")
    assert game.guesses_left == 5 and not game.done


def test_role_tags_are_removed_from_the_shown_message() -> None:
    game = new_game("speed")
    game.play("[GAME] [Player][crane]")
    assert game.transcript[1] == " [crane]"
    # the guess is read from the message as sent, where the first [word] is "GAME"
    assert game.transcript[2].startswith("You attempted an invalid move. Reason: Your word must be exactly 5 letters.")


def test_second_invalid_move_in_a_row_ends_the_game_with_the_last_guess_partial_score() -> None:
    game = new_game("speed")
    game.play("[erase]")                     # Y X X Y Y → (0 + 1.5) / 5
    game.play("[cat]")
    game.play("[qqqqq]")
    assert game.done and game.reward == pytest.approx(0.3) and game.ended_by_invalid_move
    assert game.end_reason == "Invalid Move: 'qqqqq' is not an English word."
    assert game.transcript[-1] == "[qqqqq]"  # no reply is shown for the move that ended the game
    assert game.turn == 2 and game.invalid_moves == 2


def test_invalid_end_before_any_guess_scores_zero() -> None:
    game = new_game("speed")
    game.play("[crane")
    game.play("crane]")
    assert game.done and game.reward == 0.0
    assert game.end_reason.startswith("Invalid Move: You tried submitting a word in the wrong format.")


def test_a_valid_guess_clears_the_invalid_move_count() -> None:
    game = new_game("speed")
    for message in ("[cat]", "[crane]", "[dog]", "[slate]", "[xyzzy]", "[ghost]"):
        game.play(message)
    assert not game.done and game.invalid_moves == 3 and game.guesses_left == 3


def test_win_rewards_one_and_shows_no_feedback() -> None:
    game = new_game("speed")
    game.play("[crane]")
    game.play("[SPEED]")
    assert game.done and game.won and game.reward == 1.0
    assert game.end_reason == "Congratulations! You guessed the word correctly!"
    assert game.render().endswith("You have 5 guesses left.\n[GAME] [SPEED]")


def test_loss_after_six_guesses_rewards_the_last_guess_partial_score() -> None:
    game = new_game("speed")
    for word in ("crane", "slate", "ghost", "abbey", "erase", "spend"):
        game.play(f"[{word}]")
    # spend vs speed: s p e G G G, n X, d → the last d: "G G G X G" → (4 + 0) / 5
    assert game.guesses[-1] == ("spend", ("G", "G", "G", "X", "G"))
    assert game.done and not game.won and game.reward == pytest.approx(0.8)
    assert game.render().endswith("S P E N D\nG G G X G\nYou have 0 guesses left.")
    assert game.end_reason == ("The turn limit has been reached. You didn't guess the word, but your best guess "
                               "matched 80% of the letters in the correct positions.\nThe secret word was: **speed**.")


def test_moves_after_the_end_are_refused() -> None:
    game = new_game("speed")
    game.play("[speed]")
    with pytest.raises(GameOverError, match="reset"):
        game.play("[crane]")


def test_word_lists() -> None:
    secrets, words = secret_words(), valid_words()
    assert len(secrets) == 140 and len(set(secrets)) == 140 and list(secrets) == sorted(secrets)
    assert 5000 < len(words) < 7000 and set(secrets) <= set(words) and list(words) == sorted(set(words))
    assert all(len(word) == 5 and word.isascii() and word.isalpha() and word.islower() for word in words)
    assert {"crane", "speed", "erase", "geese", "abbey", "slate"} <= set(words)
    assert is_valid_guess("CRANE") and not is_valid_guess("xyzzy")


@pytest.mark.parametrize("name", ["seeded_win", "loss_speed", "invalid_paths", "two_format_errors", "tags_and_case",
                                  "first_guess_win", "digits_then_long"])
def test_matches_textarena_transcripts_step_by_step(textarena_reference: dict[str, Any], name: str) -> None:
    (episode,) = [item for item in textarena_reference["episodes"] if item["name"] == name]
    game = new_game(episode["secret"])
    first, *steps = episode["steps"]
    assert game.render() == first["text"]
    for step in steps:
        game.play(step["action"])
        assert game.render() == step["text"]
        assert (game.done, game.turn, game.reward) == (step["done"], step["turn"], step["reward"])
        assert (game.end_reason, game.ended_by_invalid_move) == (step["reason"], step["invalid_move"])


def test_seeds_draw_the_same_secrets_as_textarena(textarena_reference: dict[str, Any]) -> None:
    drawn = {seed: random.Random(int(seed)).choice(secret_words()) for seed in textarena_reference["seeded_secrets"]}
    assert drawn == textarena_reference["seeded_secrets"]
