"""Sample transcripts for the replay view: Wordle's scripted policies playing the test split through a real server.

The games are played the way a model plays them: one `guess` tool call per turn over `/ws`, with the
chat that a model would have seen. Lines follow the transcript format `envkit eval` writes
(`envkit.transcript/1`, one game per line). The committed files under `fixtures/transcripts/` are
what this module writes (a test checks that they still are); to write them again:

    PYTHONPATH=src python tests/transcript_fixtures.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "transcripts"
GAMES = 3
SYSTEM_PROMPT = "You are playing Wordle. Call the guess tool with a five-letter word in square brackets."


def policies() -> dict[str, Any]:
    """The two players, by model label: Wordle's reference solver and its seeded random guesser."""
    from wordle_env.policies import RandomPolicy, Solver

    return {"policy:solver": Solver(), "policy:random": RandomPolicy(seed=7)}


def play_game(url: str, model: str, policy: Any, split: str, task_index: int, task: dict[str, Any]) -> dict[str, Any]:
    """One game of `policy` on a served Wordle, as one transcript record."""
    from envkit import EnvClient

    with EnvClient(url).sync() as env:
        start = env.reset(**task)
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                          {"role": "user", "content": start.text}]
        turns: list[dict[str, Any]] = []
        observation, done, reward = start.observation, start.done, 0.0
        while not done:
            arguments = {"guess": policy.act(observation)}
            result = env.call("guess", **arguments)
            messages.append({"role": "assistant", "content": "", "tool_calls": [{"name": "guess", "arguments": arguments}]})
            messages.append({"role": "tool", "content": result.text})
            turns.append({"tool": "guess", "arguments": arguments, "result": result.text, "reward": result.reward,
                          "done": result.done, "error": None})
            observation, done, reward = result.observation, bool(result.done), float(result.reward or 0.0)
        state = env.state()
    components = state["reward_components"]
    won = components["win"] == 1.0
    return {"format": "envkit.transcript/1", "model": model, "env": "wordle", "split": split, "task_index": task_index,
            "task": task, "messages": messages, "turns": turns, "reward": reward, "done": done, "lost": False,
            "metrics": {"won": int(won), "guesses": len(state["raw_state"]["game_state"]["guess_history"]),
                        "invalid_guesses": int(components["invalid_moves"])}}


def transcripts(url: str) -> dict[str, str]:
    """File name → JSONL text: each policy's games on the first `GAMES` tasks of Wordle's test split."""
    from envkit.serving import resolve_target

    tasks = resolve_target("wordle").env_class.tasks("test")[:GAMES]   # also makes wordle_env importable
    return {f"wordle-{model.split(':')[1]}.jsonl": "".join(
                json.dumps(play_game(url, model, policy, "test", index, dict(task))) + "\n"
                for index, task in enumerate(tasks))
            for model, policy in policies().items()}


def main() -> None:
    from envkit.serving import app_from_environment, resolve_target
    from envkit.testing import running_server

    target = resolve_target("wordle")
    with running_server(app_from_environment(target.env_class, env_name="wordle")) as url:
        for name, text in transcripts(url).items():
            (FIXTURES / name).write_text(text)
            print(f"wrote {FIXTURES / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
