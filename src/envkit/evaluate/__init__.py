"""`envkit eval`: play a model (or a scripted policy) on an environment's test tasks and tabulate how it did.

    from envkit.evaluate import EvalSettings, evaluate, render_table
    result = evaluate(EvalSettings(env=["wordle"], models=["tiny"], games=30))
    print(render_table(result.rows))

A local model plays through the tool-calling loop `envkit train` trains it with (`envkit.play.loop`,
`envkit.play.model_player`); a model behind an OpenAI-compatible server through its chat API (`openai_player`);
scripted players through the same loop (`envkit.play.policy_player`). The table is `envkit.play.table`;
transcripts are `envkit.transcripts`.
Heavy libraries (torch, transformers, TRL) load only when a local model plays.
"""

from ..play.games import play_and_score, transcript_of
from ..play.table import Row, render_table, wilson_interval
from .runner import EvalSettings, Evaluation, evaluate

__all__ = ["EvalSettings", "Evaluation", "Row", "evaluate", "play_and_score", "render_table", "transcript_of",
           "wilson_interval"]
