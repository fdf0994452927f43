"""The capture proxy: an OpenAI-compatible endpoint for loop-owning agents that records every call exactly.

An agent that owns its loop (its own planner, tools and stop rules) talks to `CaptureProxy` as to any
OpenAI-compatible server, with its session's key. Each call is sampled from the trainer's engine and kept with
the engine's own prompt and completion token ids, the log-probability of each sampled id and a loss mask; a call
that extends the previous exchange reuses the sampled ids exactly (`continuation`). A session's calls come out
as OpenEnv's `TrainingTrace` (`session.trace()`, `write_traces`). docs/training.md tells the whole story.

    with CaptureProxy(TransformersEngine(model, tokenizer)) as proxy:
        session = proxy.open_session(max_calls=16, sampling=Sampling(temperature=1.0))
        ...  # the agent runs with OPENAI_BASE_URL=proxy.url, OPENAI_API_KEY=session.api_key
        write_traces(run / "traces.jsonl", [session.trace(reward=1.0)])

Heavy imports (torch, transformers, uvicorn) load only when an engine generates or a proxy starts.
"""

from .engine import Engine, EngineError, Generation, GenerationRequest, Sampling
from .openai_engine import OpenAIEngine
from .proxy import CaptureProxy
from .records import Call
from .session import CaptureSession
from .trace import SCHEMA_VERSION, training_trace, write_traces
from .transformers_engine import TransformersEngine

__all__ = ["CaptureProxy", "CaptureSession", "Call", "Sampling", "Engine", "EngineError", "Generation",
           "GenerationRequest", "TransformersEngine", "OpenAIEngine", "write_traces", "training_trace",
           "SCHEMA_VERSION"]
