"""Record reference Wordle transcripts from TextArena 0.7.4 (development tool, not run by the tests).

TextArena reads its word lists from NLTK data that is downloaded at run time. This script feeds it
envkit's shipped lists instead (secrets as the Basic English list with every word tagged a noun;
no extra NLTK dictionary), plays scripted episodes through `textarena.make("Wordle-v0")` with its
default wrappers, and writes what an OpenEnv TextArena server would send for each step.

    pip install textarena==0.7.4
    python record_textarena.py > textarena_transcripts.json
"""

import json
import sys
from pathlib import Path

import nltk
from nltk.corpus import words as nltk_words

DATA = Path(__file__).resolve().parents[2] / "wordle_env" / "data"
SECRETS = (DATA / "secret_words.txt").read_text().split()
nltk_words.words = lambda fileid=None: SECRETS if fileid == "en-basic" else []
nltk.download = lambda *args, **kwargs: True

import textarena  # noqa: E402
import textarena.envs.Wordle.env as wordle_module  # noqa: E402

wordle_module.pos_tag = lambda tokens: [(token, "NN") for token in tokens]

EPISODES = [
    {"name": "seeded_win", "seed": 7, "actions": ["[crane]", "I think [ghost] fits", "SECRET"]},
    {"name": "loss_speed", "word": "speed",
     "actions": ["[erase]", "[geese]", "[abbey]", "[crane]", "[slate]", "[ghost]"]},
    {"name": "invalid_paths", "word": "abbey",
     "actions": ["crane is my guess", "[babes]", "[cat]", "[crane]", "[crane]", "[qqqqq]"]},
    {"name": "two_format_errors", "word": "erase", "actions": ["[crane", "crane]"]},
    {"name": "tags_and_case", "word": "erase",
     "actions": ["speed", "[Player] [GEESE]", "[GAME][eerie] and more", "[not a word]", "[ERASE]"]},
    {"name": "first_guess_win", "word": "geese", "actions": ["[GEESE]"]},
    {"name": "digits_then_long", "word": "blade", "actions": ["[12345]", "[kebab]", "[kebabs]", "[blade]"]},
]


def play(episode: dict) -> dict:
    env = textarena.make("Wordle-v0")
    env.reset(num_players=1, seed=episode.get("seed"))
    if "word" in episode:
        env.state.game_state["secret_word"] = episode["word"]
    secret = env.state.game_state["secret_word"]
    steps = [snapshot(env, None)]
    for action in episode["actions"]:
        action = f"[{secret}]" if action == "SECRET" else action
        env.step(action)
        steps.append(snapshot(env, action))
        if env.state.done:
            break
    return {**episode, "secret": secret, "steps": steps}


def snapshot(env, action):
    _, text = env.get_observation()
    state = env.state
    rewards = state.rewards
    return {"action": action, "text": text, "done": state.done, "turn": state.turn,
            "reward": None if rewards is None else float(rewards[0]),
            "reason": state.game_info[0].get("reason"), "invalid_move": state.game_info[0]["invalid_move"]}


def seeded_secrets(count: int) -> dict:
    secrets = {}
    for seed in range(count):
        env = textarena.make("Wordle-v0")
        env.reset(num_players=1, seed=seed)
        secrets[str(seed)] = env.state.game_state["secret_word"]
    return secrets


json.dump({"textarena": textarena.__version__ if hasattr(textarena, "__version__") else "0.7.4",
           "episodes": [play(episode) for episode in EPISODES], "seeded_secrets": seeded_secrets(20)},
          sys.stdout, indent=1)
