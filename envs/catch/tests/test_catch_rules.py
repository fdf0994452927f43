"""Catch's rules, observation and text, played in process: OpenSpiel's catch, move by move."""

from __future__ import annotations

import itertools

import pytest
from catch_env import CatchAction, CatchEnvironment, CatchObservation
from catch_env.game import CatchGame, Positions, decode_tensor

LEFT, STAY, RIGHT = 0, 1, 2


def play(env: CatchEnvironment, actions: list[int]) -> list[CatchObservation]:
    return [env.step(CatchAction(action_id=action)) for action in actions]


def ones(observation: CatchObservation) -> list[int]:
    return [index for index, value in enumerate(observation.info_state) if value == 1.0]


@pytest.mark.parametrize("column", range(5))
def test_every_start_column_plays_nine_steps_and_pays_only_at_the_end(column: int) -> None:
    env = CatchEnvironment()
    first = env.reset(ball_column=column)
    assert (first.game_phase, first.reward, first.done, first.current_player_id) == ("initial", None, False, 0)
    assert first.legal_actions == [0, 1, 2]
    assert len(first.info_state) == 50 and ones(first) == [column, 45 + 2]
    observations = play(env, [STAY] * 9)
    for row, observation in enumerate(observations[:-1], start=1):
        assert (observation.game_phase, observation.reward, observation.done) == ("playing", 0.0, False)
        assert ones(observation) == [row * 5 + column, 47]
        assert observation.legal_actions == [0, 1, 2] and observation.current_player_id == 0
    last = observations[-1]
    assert (last.game_phase, last.done, last.current_player_id, last.legal_actions) == ("terminal", True, -4, [])
    assert last.reward == (1.0 if column == 2 else -1.0)
    assert ones(last) == ([47] if column == 2 else sorted([45 + column, 47]))
    assert env.state.step_count == 9 and env.state.episode_return == last.reward


@pytest.mark.parametrize("column", range(5))
def test_walking_to_the_ball_catches_it_and_stopping_short_misses(column: int) -> None:
    toward = [LEFT] * (2 - column) + [RIGHT] * (column - 2)
    env = CatchEnvironment()
    env.reset(ball_column=column)
    assert play(env, toward + [STAY] * (9 - len(toward)))[-1].reward == 1.0
    env.reset(ball_column=column)
    wrong = RIGHT if column <= 2 else LEFT
    assert play(env, [wrong] * 9)[-1].reward == -1.0


def test_paddle_is_clamped_at_both_walls() -> None:
    env = CatchEnvironment()
    env.reset(ball_column=0)
    columns = [observation.paddle_column for observation in play(env, [LEFT] * 5 + [RIGHT] * 4)]
    assert columns == [1, 0, 0, 0, 0, 1, 2, 3, 4]
    env.reset(ball_column=4)
    last = play(env, [RIGHT] * 9)[-1]
    assert last.paddle_column == 4 and last.reward == 1.0 and ones(last) == [49]


def test_every_action_sequence_from_every_column_matches_the_rule() -> None:
    """All 3**4 openings, then stay: the paddle ends where the clamped walk puts it."""
    for column, opening in itertools.product(range(5), itertools.product((LEFT, STAY, RIGHT), repeat=4)):
        paddle = 2
        for action in opening:
            paddle = min(max(paddle + action - 1, 0), 4)
        game = CatchGame(column)
        for action in (*opening, *[STAY] * 5):
            game.apply(action)
        assert (game.paddle_column, game.done, game.reward) == (paddle, True, 1.0 if paddle == column else -1.0)


def test_board_string_is_openspiels() -> None:
    game = CatchGame(3)
    assert game.board() == "...o.\n" + ".....\n" * 8 + "..x..\n"
    for action in [RIGHT] * 9:
        game.apply(action)
    assert game.board() == ".....\n" * 9 + "...ox\n"
    caught = CatchGame(4)
    for action in [RIGHT] * 9:
        caught.apply(action)
    assert caught.board() == ".....\n" * 9 + "....x\n"


def test_seeds_reproduce_games_and_unseeded_resets_continue_the_sequence() -> None:
    def columns(env: CatchEnvironment, seed: int) -> list[int | None]:
        env.reset(seed=seed)
        return [env.state.start_column] + [env.reset().ball_column for _ in range(30)]

    first, second = columns(CatchEnvironment(), 7), columns(CatchEnvironment(), 7)
    assert first == second and set(first) == {0, 1, 2, 3, 4}
    assert columns(CatchEnvironment(), 8) != first
    starts = [CatchEnvironment().reset(seed=seed).ball_column for seed in range(1000)]
    assert all(starts.count(column) > 150 for column in range(5))  # uniform: 200 each expected


def test_pinned_column_wins_over_the_seed_and_leaves_later_games_unchanged() -> None:
    pinned, plain = CatchEnvironment(), CatchEnvironment()
    assert pinned.reset(seed=5, ball_column=4).ball_column == 4
    plain.reset(seed=5)
    assert [pinned.reset().ball_column for _ in range(5)] == [plain.reset().ball_column for _ in range(5)]
    assert pinned.state.seed is None and pinned.state.start_column == pinned.state.ball_column


def test_state_records_the_episode() -> None:
    env = CatchEnvironment()
    assert env.state.start_column is None and env.state.step_count == 0
    env.reset(seed=3, episode_id="game-1")
    play(env, [LEFT, RIGHT])
    state = env.state
    assert (state.episode_id, state.seed, state.actions, state.step_count, state.ball_row) == ("game-1", 3, [0, 2], 2, 2)
    assert (state.game_name, state.agent_player, state.num_players) == ("catch", 0, 1)
    assert state.game_params == {"rows": 10, "columns": 5}


def test_text_for_a_language_model() -> None:
    env = CatchEnvironment()
    text = env.reset(ball_column=4).as_text()
    assert text == "\n".join([". . . . o", *[". . . . ."] * 8, ". . x . ."]) + (
        "\nBall (o): row 1 of 10, column 5 of 5. Paddle (x): column 3 of 5, bottom row."
        "\nThe ball is 2 columns to the right of the paddle; it lands after 9 more moves.")
    assert "1 column to the left of the paddle" in env.reset(ball_column=1).as_text()
    env.reset(ball_column=2)
    observations = play(env, [STAY] * 9)
    assert "directly above the paddle; it lands after 1 more move." in observations[-2].as_text()
    assert observations[-1].as_text().endswith(
        ". . x . .\nThe ball landed on the paddle in column 3: caught, reward +1. The game is over.")
    env.reset(ball_column=0)
    assert play(env, [STAY] * 9)[-1].as_text().endswith(
        "o . x . .\nThe ball landed in column 1 but the paddle is in column 3: missed, reward -1. The game is over.")


def test_tools_move_and_stay() -> None:
    env = CatchEnvironment()
    env.reset(ball_column=0)
    assert env.move("left").paddle_column == 1
    assert env.stay().paddle_column == 1
    assert env.move("right").paddle_column == 2
    with pytest.raises(ValueError, match='direction must be "left" or "right", got \'up\'; call stay()'):
        env.move("up")  # type: ignore[arg-type]


def test_positions_decode_from_the_tensor_alone() -> None:
    env = CatchEnvironment()
    observation = env.reset(ball_column=1)
    bare = CatchObservation(info_state=observation.info_state)
    assert bare.positions() == Positions(0, 1, 2) == decode_tensor(observation.info_state)
    assert bare.as_text() == observation.as_text()
    with pytest.raises(ValueError, match="50 floats"):
        decode_tensor([0.0] * 49)
    last = play(env, [STAY] * 9)[-1]
    with pytest.raises(ValueError, match="no falling ball"):
        decode_tensor(last.info_state)


BAD_STEPS = [
    (lambda: CatchAction(action_id=3), "action_id 3 is not a Catch action; use 0 (left), 1 (stay) or 2 (right)"),
    (lambda: CatchAction(action_id=-1), "action_id -1 is not a Catch action"),
    (lambda: CatchAction(action_id="left"), "action_id must be the integer 0 (left), 1 (stay) or 2 (right), got 'left'"),
    (lambda: CatchAction(action_id=True), "action_id must be the integer 0 (left), 1 (stay) or 2 (right), got True"),
    (lambda: CatchAction(action_id=1.0), "action_id must be the integer"),
    (lambda: CatchAction(action_id=1, game_name="tic_tac_toe"), 'this server plays "catch", not \'tic_tac_toe\''),
    (lambda: CatchAction(action_id=1, game_params={"rows": 8}), "standard 10 x 5 board only"),
    (lambda: CatchAction(action_id=1, jump=True), "Extra inputs are not permitted"),
]


@pytest.mark.parametrize(("build", "message"), BAD_STEPS)
def test_bad_actions_are_refused_with_what_to_send(build, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()


def test_standard_game_params_are_accepted() -> None:
    assert CatchAction(action_id=0, game_params={"rows": 10, "columns": 5}).game_params == {"rows": 10, "columns": 5}


def test_step_before_reset_after_the_end_and_with_a_wrong_type() -> None:
    env = CatchEnvironment()
    with pytest.raises(ValueError, match=r"call reset\(\) first"):
        env.step(CatchAction(action_id=1))
    env.reset(ball_column=2)
    with pytest.raises(TypeError, match=r"step\(\) takes a CatchAction, e.g. CatchAction\(action_id=1\); got int"):
        env.step(1)  # type: ignore[arg-type]
    play(env, [STAY] * 9)
    for late in (lambda: env.step(CatchAction(action_id=1)), env.stay, lambda: env.move("left")):
        with pytest.raises(ValueError, match="Game over: the ball has already landed.*reset to play again"):
            late()
    assert env.state.step_count == 9


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"ball_column": 5}, r"ball_column 5 is off the board; use a column from 0 \(left\) to 4 \(right\)"),
    ({"ball_column": -1}, "ball_column -1 is off the board"),
    ({"ball_column": "2"}, "ball_column must be a column from 0 to 4, got '2'"),
    ({"ball_column": 2.0}, "ball_column must be a column from 0 to 4, got 2.0"),
    ({"seed": "abc"}, "seed must be a whole number, got 'abc'"),
    ({"seed": True}, "seed must be a whole number, got True"),
    ({"episode_id": 5}, "episode_id must be a string, got 5"),
])
def test_bad_reset_arguments_are_refused_and_change_nothing(kwargs: dict, message: str) -> None:
    env = CatchEnvironment()
    env.reset(seed=11)
    before = env.state
    with pytest.raises(ValueError, match=message):
        env.reset(**kwargs)
    assert env.state == before
    reference = CatchEnvironment()
    reference.reset(seed=11)
    assert env.reset().ball_column == reference.reset().ball_column
