"""The /web surface over HTTP: the page and its files, its JSON routes, `/` → `/web`.

What the page does in a browser is tested in a real Chromium in test_web_browser.py.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Literal

import httpx
import pytest

from envkit import Action, Environment, Observation, State, create_app
from envkit.app.targets import app_from_environment, resolve_target
from envkit.testing import running_server
from envkit.surfaces.web import STATIC_DIR, reset_schema


class PuzzleAction(Action):
    move: str


class PuzzleObservation(Observation):
    board: str = ""


class PuzzleEnvironment(Environment[PuzzleAction, PuzzleObservation, State]):
    """A puzzle whose reset takes every kind of argument."""

    def reset(self, seed: int | None = None, episode_id: str | None = None, size: int = 3,
              mode: Literal["fast", "slow"] = "fast", shape: tuple[int, int] | None = None, *,
              strict: bool, start: object = object(), **options: Any) -> PuzzleObservation:
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
        assert http.get("/metadata").json()["web"] == {"served": True, "path": "/web"}


def test_the_page_html_carries_the_environments_name_and_a_loading_note_escaped() -> None:
    """The first paint, before any script: the frame with the environment's name and a loading note."""
    target = resolve_target("echo")
    app = app_from_environment(target.env_class, env_name="<b>echo</b>")
    with running_server(app) as url:
        page = httpx.get(url + "/web", trust_env=False)
    assert page.status_code == 200 and "default-src 'self'" in page.headers["content-security-policy"]
    assert '<span id="env-name" class="env-name">&lt;b&gt;echo&lt;/b&gt;</span>' in page.text
    assert "<title>&lt;b&gt;echo&lt;/b&gt; · envkit</title>" in page.text
    assert "Loading &lt;b&gt;echo&lt;/b&gt;" in page.text and "__ENV_" not in page.text
    assert re.search(r'<section id="view-play" class="view" aria-label="Play">', page.text)


def test_the_page_html_shows_the_tools_and_splits_before_any_script_runs() -> None:
    """What a screenshot taken at first paint shows: each tool's call and summary, and the task splits."""
    target = resolve_target("echo")
    with running_server(app_from_environment(target.env_class, env_name="echo")) as url:
        page = httpx.get(url + "/web", trust_env=False).text
    assert "<li><code>echo(message)</code> Echo a message back" in page
    assert "<li><code>echo_with_length(message)</code>" in page
    assert '<p class="muted" id="summary-splits">Task splits: train (8), test (4)</p>' in page


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


def test_reset_arguments_route_describes_what_reset_takes(wordle_url: str) -> None:
    with httpx.Client(base_url=wordle_url, trust_env=False) as http:
        schema = http.get("/web/reset-arguments").json()
        properties = schema["properties"]
        assert list(properties) == ["seed", "episode_id", "word", "secret_index"]
        assert properties["seed"] == {"type": "integer", "nullable": True}
        assert properties["word"]["type"] == "string"
        assert schema["required"] == [] and schema["additionalProperties"] is False
        # the page's task picker reads the splits and tasks the Open Reward Standard routes serve
        assert [split["name"] for split in http.get("/splits").json()] == ["train", "test"]
        assert len(http.post("/tasks", json={"split": "test"}).json()["tasks"]) == 35


def test_reset_schema_follows_the_signature_and_docstring() -> None:
    schema = reset_schema(PuzzleEnvironment)
    properties = schema["properties"]
    assert properties["size"] == {"type": "integer", "description": "Side of the board.", "default": 3}
    assert properties["mode"] == {"type": "string", "enum": ["fast", "slow"], "default": "fast"}
    assert properties["shape"] == {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}],
                                   "nullable": True}
    assert properties["strict"] == {"type": "boolean", "description": "Whether bad moves end the game."}
    assert schema["required"] == ["strict"] and schema["additionalProperties"] is True
    assert properties["start"] == {}   # no JSON schema for its type, and a default JSON cannot hold
    assert "options" not in properties


def test_reset_arguments_of_an_open_ended_reset_are_served() -> None:
    app = create_app(PuzzleEnvironment, PuzzleAction, PuzzleObservation)
    with running_server(app) as url, httpx.Client(base_url=url, trust_env=False) as http:
        served = http.get("/web/reset-arguments").json()
        assert served == reset_schema(PuzzleEnvironment) and served["additionalProperties"] is True
        assert http.get("/web").status_code == 200
