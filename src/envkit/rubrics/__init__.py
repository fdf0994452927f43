"""Rewards as trees of named parts (`Rubric`), each named leaf a reward component; an LLM judge among them.

    from envkit.rubrics import WeightedSum, Gate, score

    class Answer(Rubric):
        def forward(self, action, observation) -> float:
            return float(observation.correct)

    self.rubric = WeightedSum([Answer(), Format()], [0.8, 0.2], names=["answer", "format"])
    ...
    return score(self.rubric, action, observation)   # in step: reward set, components `answer` and `format` reported

The same tree reads OpenEnv's rubrics (`openenv.core.rubrics`) for OpenEnv environments served by envkit.
"""

from .apply import report_components, score, score_async
from .base import Rubric, Score
from .components import component_names, components, rubric_metrics, step_rewards
from .containers import Gate, RubricDict, RubricList, Sequential, WeightedSum
from .judge import JudgeEndpoint, JudgeUsage, LLMJudge, judge_metrics, judge_usage
from .trajectory import ExponentialDiscountingTrajectoryRubric, TrajectoryRubric

__all__ = [
    "Rubric", "Score", "WeightedSum", "Gate", "Sequential", "RubricList", "RubricDict", "TrajectoryRubric",
    "ExponentialDiscountingTrajectoryRubric", "LLMJudge", "JudgeEndpoint", "JudgeUsage", "judge_usage", "judge_metrics", "score",
    "score_async", "report_components", "component_names", "components", "rubric_metrics", "step_rewards",
]
