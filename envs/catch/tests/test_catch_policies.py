"""The reference policies: the optimal one catches every ball, the random one about one in five."""

from __future__ import annotations

import pytest
from catch_env import CatchAction, CatchEnvironment
from catch_env.policies import TOOL_CALLS, OptimalPolicy, RandomPolicy, evaluate, main, play_episode


@pytest.mark.parametrize("column", range(5))
def test_optimal_policy_catches_from_every_column(column: int) -> None:
    episode = play_episode(OptimalPolicy(), ball_column=column)
    assert episode.caught and episode.start_column == column and len(episode.actions) == 9
    assert episode.actions[: abs(column - 2)] == ((0,) if column < 2 else (2,)) * abs(column - 2)


def test_optimal_policy_reads_every_observation_form() -> None:
    observation = CatchEnvironment().reset(ball_column=0)
    policy = OptimalPolicy()
    wire = observation.model_dump()
    assert policy(observation) == policy(wire) == policy(observation.info_state) == 0
    with pytest.raises(ValueError, match="no info_state"):
        policy({"legal_actions": [0, 1, 2]})


def test_policies_refuse_a_finished_game() -> None:
    env = CatchEnvironment()
    env.reset(ball_column=2)
    for _ in range(9):
        last = env.stay()
    for policy in (OptimalPolicy(), RandomPolicy(seed=0)):
        with pytest.raises(ValueError, match="game is over"):
            policy(last)


def test_evaluation_is_reproducible_and_the_random_policy_is_random() -> None:
    assert evaluate(OptimalPolicy(), games=100, seed=0).win_rate == 1.0
    first, again = evaluate(RandomPolicy(seed=1), games=300, seed=0), evaluate(RandomPolicy(seed=1), games=300, seed=0)
    assert first == again
    assert 0.08 < first.win_rate < 0.35  # exactly 1/5 in expectation: the clamped random walk ends uniformly
    assert first.mean_reward == pytest.approx(2 * first.win_rate - 1)
    with pytest.raises(ValueError, match="games must be at least 1"):
        evaluate(OptimalPolicy(), games=0)


def test_tool_calls_play_the_same_game_as_action_ids() -> None:
    by_action, by_tool = CatchEnvironment(), CatchEnvironment()
    policy = RandomPolicy(seed=4)
    observation = by_action.reset(seed=9)
    by_tool.reset(seed=9)
    while not observation.done:
        action = policy(observation)
        name, arguments = TOOL_CALLS[action]
        observation = by_action.step(CatchAction(action_id=action))
        assert getattr(by_tool, name)(**arguments) == observation


def test_command_prints_the_readme_table(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--games", "20", "--seed", "0"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| policy | games | caught | win rate | mean reward |"
    assert lines[2] == "| optimal | 20 | 20 | 100.0% | +1.000 |" and lines[3].startswith("| random | 20 |")
    with pytest.raises(SystemExit) as error:
        main(["--games", "0"])
    assert error.value.code == 2 and "--games must be at least 1" in capsys.readouterr().err
