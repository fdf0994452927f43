"""The Wordle environment in-process: seeds, pinned words, OpenEnv observation shapes, the tool, reward parts."""

from __future__ import annotations

import pytest
from wordle_env import ENV_ID, GameOverError, WordleAction, WordleEnvironment, WordleObservation
from wordle_env.game import prompt_text

from envkit.tools import tool_specs


def play(env: WordleEnvironment, *messages: str) -> WordleObservation:
    observation = None
    for message in messages:
        observation = env.step(WordleAction(message=message))
    assert observation is not None
    return observation


def secret_of(env: WordleEnvironment) -> str:
    assert env.secret_word is not None
    return env.secret_word


def test_same_seed_same_secret_and_seeds_vary() -> None:
    env = WordleEnvironment()
    env.reset(seed=11)
    first = secret_of(env)
    env.reset(seed=11)
    assert secret_of(env) == first == "steel"
    secrets = set()
    for seed in range(40):
        env.reset(seed=seed)
        secrets.add(secret_of(env))
    assert len(secrets) > 20


def test_word_pins_the_secret_in_any_case() -> None:
    env = WordleEnvironment()
    env.reset(seed=11, word="CRANE")
    assert secret_of(env) == "crane"
    assert play(env, "[crane]").reward == 1.0


@pytest.mark.parametrize("word", ["xyzzy", "cranes", "", "cr4ne", 12345])
def test_a_word_that_could_never_be_guessed_is_refused(word: object) -> None:
    with pytest.raises(ValueError, match="cannot be the secret: give a five-letter English word"):
        WordleEnvironment().reset(word=word)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", ["7", 1.5, True])
def test_a_seed_that_is_not_an_integer_is_refused(seed: object) -> None:
    with pytest.raises(ValueError, match="is not an integer"):
        WordleEnvironment().reset(seed=seed)  # type: ignore[arg-type]


def test_reset_observation_has_openenv_textarena_fields() -> None:
    env = WordleEnvironment()
    observation = env.reset(seed=1, episode_id="episode-1")
    text = "\n[GAME] " + prompt_text()
    assert observation.prompt == text.strip()
    assert [message.model_dump() for message in observation.messages] == [
        {"sender_id": -1, "content": text, "category": "MESSAGE"}]
    assert (observation.current_player_id, observation.legal_players, observation.info) == (0, [0], {})
    assert (observation.reward, observation.done) == (0.0, False)
    assert observation.metadata == {"env_id": ENV_ID, "turn": 0, "raw_messages": [
        {"sender_id": -1, "content": text, "category": "MESSAGE"}]}
    assert observation.as_text() == observation.feedback == text
    assert env.state.episode_id == "episode-1" and env.state.step_count == 0


def test_prompt_is_the_game_text_until_a_move_counts_then_the_env_id() -> None:
    env = WordleEnvironment()
    env.reset(word="speed")
    warned = play(env, "[cat]")
    assert warned.prompt.startswith("[GAME] You are Playing Wordle.") and warned.prompt.endswith("avoid penalties.")
    assert play(env, "[crane]").prompt == ENV_ID


def test_step_text_is_the_new_feedback_only_and_messages_hold_everything() -> None:
    env = WordleEnvironment()
    start = env.reset(word="speed").messages[0].content
    observation = play(env, "[erase]")
    assert observation.as_text() == ("\n[GAME] [erase]\n[GAME] You submitted [erase].\nFeedback:\nE R A S E\n"
                                     "Y X X Y Y\nYou have 5 guesses left.")
    assert observation.messages[0].content == start + observation.as_text()
    warned = play(env, "[xyzzy]")
    assert warned.as_text() == ("\n[GAME] [xyzzy]\n[GAME] You attempted an invalid move. Reason: 'xyzzy' is not an "
                                "English word. Please resubmit a valid move and remember to follow the game rules to "
                                "avoid penalties.")
    won = play(env, "[speed]")
    assert won.feedback == "\n[GAME] [speed]"   # the transcript's new text, as TextArena has it
    assert won.as_text() == "\n[GAME] [speed]\n[GAME] You won! Congratulations! You guessed the word correctly! Reward: 1."


def test_reward_signals_as_openenv_computes_them() -> None:
    env = WordleEnvironment()
    env.reset(word="speed")
    first = play(env, "my guess: [erase]")
    assert first.info == {"reward_signals": {"wordle.greens": 0.0, "wordle.yellows": pytest.approx(0.6),
                                             "wordle.repetitions": 1.0, "wordle.correct": 0.0}}
    assert first.metadata["reward_signals"] == first.info["reward_signals"]
    again = play(env, "[erase]")   # a repeat: warned, and counted as seen once before
    assert again.info["reward_signals"]["wordle.repetitions"] == 0.0
    assert again.info["reward_signals"]["wordle.yellows"] == pytest.approx(0.6)
    assert play(env, "erase").info["reward_signals"]["wordle.repetitions"] == -1.0   # second invalid: game over
    assert env.state.last_info == {"reward_signals": {"wordle.greens": 0.0, "wordle.yellows": pytest.approx(0.6),
                                                      "wordle.repetitions": -1.0, "wordle.correct": pytest.approx(0.3)}}


def test_reward_components_at_a_fast_win() -> None:
    env = WordleEnvironment()
    env.reset(word="speed")
    observation = play(env, "[cat]", "[spend]", "[speed]")
    assert (observation.reward, observation.done, observation.guesses_left) == (1.0, True, 4)
    assert observation.reward_components == {"win": 1.0, "speed": pytest.approx(0.8), "greens": 1.0, "yellows": 0.0,
                                             "partial": 1.0, "invalid_moves": 1.0, "played": 1.0,
                                             "guide_win": pytest.approx(1 + 0.5 * (1 - 2 / 6)), "guide_partial": 0.0,
                                             "guide_invalid": pytest.approx(-0.1)}
    assert env.state.reward_components == observation.reward_components


def test_reward_components_at_a_loss() -> None:
    env = WordleEnvironment()
    env.reset(word="speed")
    observation = play(env, "[crane]", "[slate]", "[sweet]", "[ghost]", "[abbey]", "[erase]")
    # only the last guess counts: erase vs speed → Y X X Y Y → (0 + 0.5 * 3) / 5 (sweet would have scored 0.6);
    # the guide's partial reward counts the best guess's greens: sweet's three
    assert (observation.reward, observation.done, observation.guesses_left) == (pytest.approx(0.3), True, 0)
    assert observation.reward_components == {"win": 0.0, "speed": 0.0, "greens": 0.0, "yellows": pytest.approx(0.6),
                                             "partial": pytest.approx(0.3), "invalid_moves": 0.0,
                                             "played": pytest.approx(0.3), "guide_win": 0.0, "guide_partial": pytest.approx(0.3),
                                             "guide_invalid": 0.0}


def test_reward_components_at_an_invalid_end() -> None:
    env = WordleEnvironment()
    env.reset(word="speed")
    observation = play(env, "[erase]", "[cat]", "[cats]")
    assert (observation.reward, observation.done) == (pytest.approx(0.3), True)
    assert observation.reward_components["invalid_moves"] == 2.0 and observation.reward_components["win"] == 0.0
    # the game's reward pays the last valid guess's partial credit; `played`, what training uses, pays nothing
    assert observation.reward_components["played"] == 0.0
    state = env.state
    assert state.raw_state["game_info"]["0"] == {"role": "Player 0", "invalid_move": True, "turn_count": 2,
                                                 "reason": "Invalid Move: Your word must be exactly 5 letters."}
    assert state.raw_state["rewards"] == {"0": pytest.approx(0.3)} and state.raw_state["done"] is True


def test_state_is_shaped_like_openenv_textarena_state() -> None:
    env = WordleEnvironment()
    env.reset(word="speed", episode_id="e")
    play(env, "[erase]")
    state = env.state.model_dump()
    assert {key: state[key] for key in ("episode_id", "step_count", "env_id", "num_players", "max_turns", "turn",
                                        "last_reward")} == {
        "episode_id": "e", "step_count": 1, "env_id": "Wordle-v0", "num_players": 1, "max_turns": None, "turn": 1,
        "last_reward": 0.0}
    # TextArena's game_state, less the secret while the game runs
    assert state["raw_state"]["game_state"] == {"guess_history": [["erase", list("YXXYY")]], "word_length": 5,
                                                "num_guesses": 6}
    assert state["raw_state"]["logs"][1] == [-1, "[erase]"]
    play(env, "[speed]")
    assert env.state.raw_state["game_state"]["secret_word"] == "speed"


def test_guess_tool_schema_and_result() -> None:
    spec = tool_specs(WordleEnvironment)["guess"]
    schema = spec.schema()["function"]
    assert schema["name"] == "guess" and schema["description"].startswith("Guess the secret five-letter word.")
    assert schema["parameters"] == {"type": "object", "required": ["guess"], "properties": {
        "guess": {"type": "string", "description": 'The guessed word in square brackets, for example "[crane]".'}}}
    env = WordleEnvironment()
    env.reset(word="speed")
    result = env.guess("[geese]")
    assert result.as_text().endswith("G E E S E\nX Y G Y X\nYou have 5 guesses left.")
    assert env.guess("speed").done


def test_moves_before_reset_or_after_the_end_get_clear_errors() -> None:
    env = WordleEnvironment()
    with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
        env.step(WordleAction(message="[crane]"))
    env.reset(word="speed")
    play(env, "[speed]")
    with pytest.raises(GameOverError, match="the game is over; reset the environment"):
        env.guess("[crane]")
    assert env.reset(word="crane").done is False


def test_the_guess_tool_says_how_the_game_ended() -> None:
    env = WordleEnvironment()
    env.reset(word="point")
    assert env.guess("[point]").as_text().endswith(
        "\n[GAME] You won! Congratulations! You guessed the word correctly! Reward: 1.")
    env.reset(word="point")
    env.guess("[xy]")
    assert env.guess("[zzzzz]").as_text().endswith(
        "\n[GAME] You lost: two invalid moves in a row end the game. Invalid Move: 'zzzzz' is not an English word. "
        "The secret word was: **point**. Reward: 0.")
    env.reset(word="point")
    for word in ("crane", "slate", "ghost", "mound", "brick"):
        assert "You lost" not in env.guess(f"[{word}]").as_text()
    last = env.guess("[fluff]")
    assert last.done and last.as_text().endswith("The secret word was: **point**. Reward: 0.")
    assert "\n[GAME] You lost. The turn limit has been reached." in last.as_text()
    assert "You lost" not in last.messages[0].content   # TextArena's transcript is unchanged


def test_one_guess_left_reads_in_the_singular_for_the_model_only() -> None:
    env = WordleEnvironment()
    env.reset(word="point")
    for word in ("crane", "slate", "ghost", "mound"):
        env.guess(f"[{word}]")
    fifth = env.guess("[brick]")
    assert fifth.as_text().endswith("You have 1 guess left.")
    assert fifth.feedback.endswith("You have 1 guesses left.")   # TextArena's wording on the wire


def test_state_shows_the_secret_only_once_the_game_is_over() -> None:
    env = WordleEnvironment()
    env.reset(word="point")
    assert "secret_word" not in env.state.raw_state["game_state"]
    env.guess("[crane]")
    assert "secret_word" not in env.state.raw_state["game_state"]
    assert "point" not in str(env.state.model_dump())
    env.guess("[point]")
    assert env.state.raw_state["game_state"]["secret_word"] == "point"
