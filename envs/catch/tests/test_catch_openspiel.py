"""Catch against OpenSpiel's own `catch`: the same moves, the same observations and rewards, step by step.

Needs OpenSpiel (`pip install open_spiel`); skipped without it.
"""

from __future__ import annotations

import random

import pytest
from catch_env import CatchAction, CatchEnvironment
from catch_env.game import board_rows

pyspiel = pytest.importorskip("pyspiel", reason="OpenSpiel is not installed; `pip install open_spiel` to compare")
rl_environment = pytest.importorskip("open_spiel.python.rl_environment", reason="OpenSpiel's rl_environment is missing")


def action_sequences() -> list[tuple[int, list[int]]]:
    rng = random.Random(0)
    fixed = [[0] * 9, [1] * 9, [2] * 9, [0, 2] * 4 + [1], [2, 2, 0, 0, 0, 0, 2, 1, 1]]
    return [(column, actions) for column in range(5)
            for actions in fixed + [[rng.randrange(3) for _ in range(9)] for _ in range(60)]]


def test_same_moves_same_game_as_pyspiel() -> None:
    game = pyspiel.load_game("catch")
    assert (game.num_distinct_actions(), game.max_game_length(), game.observation_tensor_shape()) == (3, 10, [10, 5])
    env = CatchEnvironment()
    for column, actions in action_sequences():
        state = game.new_initial_state()
        assert dict(state.chance_outcomes()) == {c: pytest.approx(0.2) for c in range(5)}
        state.apply_action(column)
        ours = env.reset(ball_column=column)
        for action in [None, *actions]:
            if action is not None:
                state.apply_action(action)
                ours = env.step(CatchAction(action_id=action))
            where = f"start column {column}, moves {actions}, after {action}"
            assert ours.info_state == state.observation_tensor(0), where
            assert "".join(row + "\n" for row in board_rows(ours.positions())) == state.observation_string(0), where
            assert ours.legal_actions == state.legal_actions(0), where
            assert ours.current_player_id == state.current_player(), where
            assert ours.done == state.is_terminal(), where
            if action is not None:
                assert ours.reward == state.rewards()[0], where
        assert env.state.episode_return == state.returns()[0]


def test_same_observations_as_openenvs_wrapper_of_rl_environment() -> None:
    """OpenEnv builds its observation from OpenSpiel's rl_environment; ours must carry the same values."""
    for column, actions in action_sequences()[::7]:
        spiel = rl_environment.Environment("catch", chance_event_sampler=lambda state, column=column: column)
        env = CatchEnvironment()
        step, ours = spiel.reset(), env.reset(ball_column=column)
        for action in [None, *actions]:
            if action is not None:
                step, ours = spiel.step([action]), env.step(CatchAction(action_id=action))
            phase = "terminal" if step.last() else "initial" if step.first() else "playing"
            reward = None if step.rewards is None else float(step.rewards[0])
            expected = (list(step.observations["info_state"][0]), step.observations["legal_actions"][0],
                        step.observations["current_player"], phase, reward, step.last())
            assert (ours.info_state, ours.legal_actions, ours.current_player_id, ours.game_phase, ours.reward,
                    ours.done) == expected
