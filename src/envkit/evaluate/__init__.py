"""`envkit eval`: play a model (or a scripted policy) on an environment's test tasks and tabulate how it did.

    from envkit.evaluate import EvalSettings, evaluate, render_table
    result = evaluate(EvalSettings(env=["wordle"], models=["tiny"], games=30))
    print(render_table(result.rows))

A local model plays through the tool-calling loop `envkit train` trains it with (`loop`, `model_player`);
a model behind an OpenAI-compatible server through its chat API (`openai_player`); scripted players
through the same loop (`policy_player`). The table is `table`; transcripts are `envkit.transcripts`.
Heavy libraries (torch, transformers, TRL) load only when a local model plays.
"""

from .runner import EvalSettings, Evaluation, evaluate, play_and_score, transcript_of
from .table import Row, render_table, wilson_interval

__all__ = ["EvalSettings", "Evaluation", "Row", "evaluate", "play_and_score", "render_table", "transcript_of",
           "wilson_interval"]
