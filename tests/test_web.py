"""The /web surface over HTTP: the page and its files, its JSON routes, `/` → `/web`, and picows saying it has no page.

What the page does in a browser is tested in a real Chromium in test_web_browser.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any, Iterator, Literal

import httpx
import pytest
from transcript_fixtures import FIXTURES, transcripts

from envkit import Action, Environment, Observation, State, create_app
from envkit.serving import app_from_environment, resolve_target
from envkit.testing import running_server
from envkit.web import STATIC_DIR, reset_schema


class PuzzleAction(Action):
    move: str


class PuzzleObservation(Observation):
    board: str = ""


class PuzzleEnvironment(Environment[PuzzleAction, PuzzleObservation, State]):
    """A puzzle whose task listing breaks: its `tasks()` raises for the split "broken"."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    TASKS = {"easy": ({"size": 3}, {"size": 4}), "broken": ()}

    @classmethod
    def tasks(cls, split: str) -> Any:
        if split == "broken":
            raise RuntimeError("the task file is missing")
        return super().tasks(split)

    def reset(self, seed: int | None = None, episode_id: str | None = None, size: int = 3,
              mode: Literal["fast", "slow"] = "fast", shape: tuple[int, int] | None = None, *,
              strict: bool, **options: Any) -> PuzzleObservation:
        """Start a puzzle.

        Args:
            size: Side of the board.
            strict: Whether bad moves end the game.
        """
        return PuzzleObservation(board="." * size)

    def step(self, action: PuzzleAction) -> PuzzleObservation:
        return PuzzleObservation(board=action.move)

    @property
    def state(self) -> State:
        return State()


@pytest.fixture(scope="module")
def wordle_url() -> Iterator[str]:
    target = resolve_target("wordle")
    with running_server(app_from_environment(target.env_class, env_name="wordle")) as url:
        yield url


def test_root_redirects_to_the_page_and_the_page_loads_only_its_own_files(wordle_url: str) -> None:
    with httpx.Client(base_url=wordle_url, trust_env=False) as http:
        redirect = http.get("/")
        assert redirect.status_code == 307 and redirect.headers["location"] == "/web"
        page = http.get("/web")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert "script-src 'self'" in page.headers["content-security-policy"]
        for asset in re.findall(r'(?:href|src)="(web/static/[^"]+)"', page.text):
            served = http.get("/" + asset)
            assert served.status_code == 200, asset
        scripts = {path.name for path in STATIC_DIR.glob("*.js")}
        for script in scripts:   # every module the page imports is served, with a JavaScript type
            response = http.get(f"/web/static/{script}")
            assert response.status_code == 200 and "javascript" in response.headers["content-type"]
        assert http.get("/web/static/nothing.js").status_code == 404
        assert http.get("/metadata").json()["web"] == "/web"


def test_the_page_fetches_nothing_from_elsewhere_and_never_parses_text_as_markup() -> None:
    """The page must work offline (a Space) and render untrusted transcripts and observations as text only."""
    for path in STATIC_DIR.iterdir():
        text = path.read_text()
        assert not re.search(r"https?://|//cdn|@import", text), f"{path.name} refers to another server"
        if path.suffix == ".js":
            for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
                assert sink not in text, f"{path.name} uses {sink}"
    imports = set(re.findall(r'from "\./([\w.-]+)"', "".join(p.read_text() for p in STATIC_DIR.glob("*.js"))))
    assert imports <= {path.name for path in STATIC_DIR.glob("*.js")}


def test_tasks_route_describes_reset_and_lists_the_splits(wordle_url: str) -> None:
    with httpx.Client(base_url=wordle_url, trust_env=False) as http:
        listing = http.get("/web/tasks").json()
        assert listing["splits"] == {"train": 105, "test": 35}
        properties = listing["reset"]["properties"]
        assert list(properties) == ["seed", "episode_id", "word", "secret_index"]
        assert properties["seed"] == {"type": "integer", "nullable": True}
        assert properties["word"]["type"] == "string"
        assert listing["reset"]["required"] == [] and listing["reset"]["additionalProperties"] is False
        test = http.get("/web/tasks/test").json()
        assert test["split"] == "test" and len(test["tasks"]) == 35 and set(test["tasks"][0]) == {"secret_index"}
        missing = http.get("/web/tasks/validation")
        assert missing.status_code == 404
        assert missing.json()["detail"] == "WordleEnvironment has no split 'validation'; its splits: train, test"
        assert http.get("/health").json()["status"] == "healthy"


def test_reset_schema_follows_the_signature_and_docstring() -> None:
    schema = reset_schema(PuzzleEnvironment)
    properties = schema["properties"]
    assert properties["size"] == {"type": "integer", "description": "Side of the board.", "default": 3}
    assert properties["mode"] == {"type": "string", "enum": ["fast", "slow"], "default": "fast"}
    assert properties["shape"] == {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}],
                                   "nullable": True}
    assert properties["strict"] == {"type": "boolean", "description": "Whether bad moves end the game."}
    assert schema["required"] == ["strict"] and schema["additionalProperties"] is True
    assert "options" not in properties


def test_an_environment_whose_tasks_raise_gets_a_clear_error_and_the_server_carries_on() -> None:
    app = create_app(PuzzleEnvironment, PuzzleAction, PuzzleObservation, max_concurrent_envs=2)
    with running_server(app) as url, httpx.Client(base_url=url, trust_env=False) as http:
        failed = http.get("/web/tasks")
        assert failed.status_code == 500
        assert failed.json()["detail"] == ("the environment's splits() or tasks() raised RuntimeError: "
                                           "the task file is missing")
        broken = http.get("/web/tasks/broken")
        assert broken.status_code == 500 and "tasks('broken') raised RuntimeError" in broken.json()["detail"]
        assert http.get("/web/tasks/easy").json() == {"split": "easy", "tasks": [{"size": 3}, {"size": 4}]}
        assert http.get("/web").status_code == 200


def test_picows_serves_no_page_and_says_so() -> None:
    target = resolve_target("echo")
    with running_server(app_from_environment(target.env_class, env_name="echo"), transport="picows") as url:
        with httpx.Client(base_url=url, trust_env=False) as http:
            metadata = http.get("/metadata").json()
            assert metadata["web"] is None and "uvicorn" in metadata["web_unavailable"]
            for path in ("/", "/web", "/web/static/main.js", "/web/tasks"):
                answer = http.get(path)
                assert answer.status_code == 404 and "picows transport serves no /web page" in answer.json()["detail"]
            assert http.get("/health").json()["status"] == "healthy"


def test_serve_help_says_picows_has_no_page() -> None:
    done = subprocess.run([sys.executable, "-m", "envkit.cli", "serve", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0
    assert "no /web page" in " ".join(done.stdout.split())


def test_sample_transcripts_are_what_the_policies_play(wordle_url: str) -> None:
    """The committed replay fixtures are real games: played again through the server, they come out the same."""
    played = transcripts(wordle_url)
    assert sorted(played) == sorted(path.name for path in FIXTURES.glob("wordle-*.jsonl"))
    for name, text in played.items():
        assert (FIXTURES / name).read_text() == text, f"{name} changed; rewrite it with tests/transcript_fixtures.py"

