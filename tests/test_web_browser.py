"""The /web page in a real headless Chromium (Debian's `chromium`, driven by Playwright) against real servers.

Every game is played through the page's own forms over its own WebSocket; other sessions are real
`EnvClient`s; the transcripts replayed are written by `envkit eval` (Wordle's scripted policies).
The tests skip only when no Chromium is installed (`.ci/run` installs it).
"""

from __future__ import annotations

import json
import re
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Literal

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from envkit import Action, EnvClient, Environment, Observation, State, create_app, tool
from envkit.app.targets import app_from_environment, resolve_target
from envkit.testing import running_server

CHROMIUM = os.environ.get("ENVKIT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed: apt-get install -y chromium "
                                "(or set ENVKIT_CHROMIUM to a Chromium binary); .ci/run installs it")
GAMES = 3


class FormsAction(Action):
    choice: Literal[1, 2, 3]
    note: str = ""
    enabled: bool | None = None


class FormsObservation(Observation):
    received: str = ""


class FormsEnvironment(Environment[FormsAction, FormsObservation, State]):
    """Reports what each form sent, with its JSON types, so the generated forms can be checked."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUN_INLINE = True

    def reset(self, seed: int | None = None, episode_id: str | None = None, level: int = 1,
              **options: Any) -> FormsObservation:
        return FormsObservation(received=json.dumps({"seed": seed, "level": level, **options}))

    def step(self, action: FormsAction) -> FormsObservation:
        return FormsObservation(received=json.dumps(action.model_dump(exclude={"metadata"})))

    @property
    def state(self) -> State:
        return State()

    @tool
    def record(self, text: str, count: int, ratio: float, flag: bool, mode: Literal["fast", "slow"],
               tags: list[str], limit: int | None = None) -> str:
        """Report the arguments.

        Args:
            text: Any text.
            count: A whole number.
            ratio: Any number.
            flag: A switch.
            mode: One of two modes.
            tags: Some labels.
            limit: An optional whole number.
        """
        return json.dumps({"text": text, "count": count, "ratio": ratio, "flag": flag, "mode": mode, "tags": tags,
                           "limit": limit})


@pytest.fixture(scope="module")
def transcripts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two models' transcripts of the same Wordle games: `envkit eval` with the solver and with the random policy."""
    folder = tmp_path_factory.mktemp("transcripts")
    paths = (folder / "wordle-solver.jsonl", folder / "wordle-random.jsonl")
    runs = [subprocess.Popen([sys.executable, "-m", "envkit.cli", "eval", "--env", "wordle", "--policy", policy,
                              "--games", str(GAMES), "--transcripts", str(path)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for policy, path in zip(("solver", "random"), paths)]
    for run in runs:
        output, _ = run.communicate(timeout=120)
        assert run.returncode == 0, output
    return paths


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(10_000)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert not errors, f"the page raised: {errors}"


def serve(name: str, **settings: Any) -> Any:
    target = resolve_target(name)
    return running_server(app_from_environment(target.env_class, env_name=name, **settings))


@pytest.fixture(scope="module")
def wordle_url() -> Iterator[str]:
    with serve("wordle", max_concurrent_envs=8) as url:
        yield url


@pytest.fixture(scope="module")
def catch_url() -> Iterator[str]:
    with serve("catch", max_concurrent_envs=8) as url:
        yield url


@pytest.fixture(scope="module")
def echo_url() -> Iterator[str]:
    with serve("echo", max_concurrent_envs=8) as url:
        yield url


def test_the_first_paint_shows_the_frame_and_a_loading_state_before_any_script_runs(page: Page, wordle_url: str,
                                                                                    tmp_path: Path) -> None:
    """What a person on a slow connection sees while the scripts are still on their way (here: never arrive)."""
    page.route("**/web/static/*.js", lambda route: route.abort())
    page.goto(wordle_url + "/web")
    expect(page.locator("#env-name")).to_have_text("wordle")
    expect(page.locator("#env-description")).to_contain_text("six guesses")
    expect(page).to_have_title("wordle · envkit")
    expect(page.locator("#tab-play")).to_have_class(re.compile(r"\bactive\b"))
    expect(page.locator("#view-play")).to_be_visible()
    expect(page.locator("#view-play")).to_contain_text("Loading wordle")
    expect(page.locator("#view-replay")).to_be_hidden()
    page.screenshot(path=str(tmp_path / "first-paint.png"))


def test_the_loading_state_gives_way_to_the_play_view(page: Page, wordle_url: str) -> None:
    open_page(page, wordle_url)
    expect(page.locator("#view-play")).not_to_contain_text("Loading wordle")


def open_page(page: Page, url: str, path: str = "/web") -> None:
    page.goto(url + path)
    expect(page.locator("#reset-button")).to_be_visible()


def history(page: Page) -> Any:
    return page.locator("#history .turn")


def test_root_opens_the_page(page: Page, wordle_url: str) -> None:
    page.goto(wordle_url + "/")
    assert page.url == wordle_url + "/web"
    expect(page.locator("#env-name")).to_have_text("wordle")
    expect(page.locator("#tab-play")).to_have_class("tab active")
    expect(page.locator("#banner")).to_be_hidden()


def test_wordle_won_through_the_forms(page: Page, wordle_url: str) -> None:
    open_page(page, wordle_url)
    page.fill("#reset-word", "crane")
    page.click("#reset-button")
    expect(page.locator("#observation-text")).to_contain_text("You are Playing Wordle")
    expect(page.locator("#session-status")).to_have_text("session open")

    page.fill("#tool-guess-guess", "[slate]")
    page.click("#call-guess")
    expect(page.locator("#observation-text")).to_contain_text("S L A T E\nX X G X G")
    expect(page.locator("#observation-chips")).to_contain_text("running")

    page.fill("#tool-guess-guess", "[crane]")
    page.click("#call-guess")
    expect(page.locator("#observation-chips")).to_contain_text("reward 1")
    expect(page.locator("#observation-chips")).to_contain_text("done")
    expect(page.locator("#observation-chips .metric")).to_have_text(["won 1", "guesses 2", "invalid_guesses 0"])
    expect(history(page)).to_have_count(3)
    expect(history(page).nth(2)).to_contain_text('#2guess({"guess":"[crane]"})')
    observation = json.loads(page.locator("#observation-json").text_content())
    assert observation["guesses_left"] == 4 and observation["reward_components"]["win"] == 1.0

    page.click("#state-button")
    expect(page.locator("#state-json")).to_contain_text('"secret_word": "crane"')
    assert json.loads(page.locator("#state-json").text_content())["step_count"] == 2


def test_catch_played_from_a_task_of_the_test_split(page: Page, catch_url: str) -> None:
    open_page(page, catch_url)
    page.select_option("#task-split", "test")
    page.fill("#task-index", "0")
    page.click("#use-task")
    expect(page.locator("#task-preview")).to_have_text('test #0: {"ball_column":0,"seed":1000}')
    expect(page.locator("#reset-ball_column")).to_have_value("0")
    page.click("#reset-button")
    expect(page.locator("#observation-json")).to_contain_text('"paddle_column": 2')
    for _ in range(2):
        page.select_option("#tool-move-direction", label="left")
        page.click("#call-move")
    for _ in range(7):
        page.click("#call-stay")
    expect(history(page)).to_have_count(10)
    expect(page.locator("#observation-chips")).to_contain_text("reward 1")
    expect(page.locator("#observation-chips")).to_contain_text("done")
    expect(page.locator("#observation-text")).to_contain_text("caught")

    page.click("#call-stay")   # the game is over: the environment refuses, the page shows why where it was asked
    expect(page.locator("#tool-stay-error")).to_contain_text("EXECUTION_ERROR: ValueError: Game over")
    expect(history(page).last).to_contain_text("Game over")


def test_raw_step_form_steps_echo(page: Page, echo_url: str) -> None:
    open_page(page, echo_url)
    page.click("#reset-button")
    expect(page.locator("#observation-text")).to_have_text("Echo environment ready!")
    page.fill("#step-message", "hello")
    page.click("#step-button")
    expect(page.locator("#observation-text")).to_have_text("hello")
    expect(page.locator("#observation-chips")).to_contain_text("reward 0.5")
    assert json.loads(page.locator("#observation-json").text_content())["echoed_message"] == "hello"
    expect(history(page).last).to_contain_text('step {"message":"hello"}')


def test_errors_are_shown_where_they_happened(page: Page, wordle_url: str) -> None:
    open_page(page, wordle_url)
    page.fill("#step-message", "[crane]")
    page.click("#step-button")
    expect(page.locator("#step-error")).to_have_text(
        'NOT_RESET: step before reset: send {"type": "reset"} to start an episode first')
    expect(history(page)).to_have_count(1)
    expect(history(page).first).to_contain_text("NOT_RESET")

    page.fill("#reset-seed", "twelve")
    page.click("#reset-button")
    expect(page.locator("#reset-error")).to_have_text('seed: "twelve" is not a whole number')
    page.fill("#reset-seed", "")
    page.fill("#reset-secret_index", "999")
    page.click("#reset-button")
    expect(page.locator("#reset-error")).to_have_text(
        "EXECUTION_ERROR: ValueError: secret_index=999 names no secret noun: give a whole number from 0 to 139")
    page.fill("#task-index", "35")
    page.select_option("#task-split", "test")
    page.click("#use-task")
    expect(page.locator("#reset-error")).to_have_text("split test has tasks 0 to 34; got 35")


def test_an_error_box_goes_away_once_a_later_move_succeeds(page: Page, wordle_url: str) -> None:
    """Only the latest move's error stays up: a tool's error is cleared by a reset or another tool's success."""
    open_page(page, wordle_url)
    page.fill("#tool-guess-guess", "[crane]")
    page.click("#call-guess")
    expect(page.locator("#tool-guess-error")).to_contain_text("NOT_RESET")
    page.click("#reset-button")
    expect(page.locator("#observation-chips")).to_contain_text("reward")
    expect(page.locator("#tool-guess-error")).to_be_hidden()
    page.click("#raw-card summary")
    page.fill("#raw-frame", "{not json")
    page.click("#raw-button")
    expect(page.locator("#raw-error")).to_contain_text("INVALID_JSON")
    page.click("#call-guess")
    expect(history(page).last).to_contain_text("crane")
    expect(page.locator("#raw-error")).to_be_hidden()


def test_a_plain_headless_chromium_shows_the_tools_at_first_paint(wordle_url: str, tmp_path: Path) -> None:
    """`chromium --headless --dump-dom` reads the page as `--screenshot` paints it: no waiting for scripts."""
    done = subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                           wordle_url + "/web"], capture_output=True, text=True, timeout=60)
    assert "guess(guess)" in done.stdout and "Task splits: train" in done.stdout, done.stdout[-2000:]


def test_forms_follow_the_schemas_and_send_json_types(page: Page) -> None:
    with running_server(create_app(FormsEnvironment, FormsAction, FormsObservation, max_concurrent_envs=2)) as url:
        open_page(page, url)
        expect(page.locator("#task-split")).to_have_count(0)   # no splits, no task picker
        page.fill("#reset-level", "2")
        page.click("#episode-card .more-fields summary")
        page.fill("#reset--extra", '{"board": [1, 2]}')
        page.click("#reset-button")
        expect(page.locator("#observation-text")).to_have_text('{"seed": null, "level": 2, "board": [1, 2]}')

        assert page.locator("#tool-record-mode option").all_text_contents() == ["fast", "slow"]
        assert page.locator("#tool-record-flag").get_attribute("type") == "checkbox"
        page.fill("#tool-record-text", "hi")
        page.fill("#tool-record-count", "3.5")
        page.fill("#tool-record-ratio", "0.25")
        page.click("#call-record")
        expect(page.locator("#tool-record-error")).to_have_text('count: "3.5" is not a whole number')
        page.fill("#tool-record-count", "3")
        page.check("#tool-record-flag")
        page.select_option("#tool-record-mode", label="slow")
        page.fill("#tool-record-tags", '["a", "b"]')
        page.click("#call-record")
        expect(page.locator("#tool-record-error")).to_be_hidden()
        expect(page.locator("#observation-text")).to_have_text(
            '{"text": "hi", "count": 3, "ratio": 0.25, "flag": true, "mode": "slow", "tags": ["a", "b"], "limit": null}')
        page.fill("#tool-record-tags", "[a, b]")
        page.click("#call-record")
        expect(page.locator("#tool-record-error")).to_contain_text("tags: not valid JSON (")

        assert page.locator("#step-choice option").all_text_contents() == ["1", "2", "3"]
        assert page.locator("#step-enabled option").all_text_contents() == ["(not set)", "true", "false"]
        page.select_option("#step-choice", label="2")
        page.select_option("#step-enabled", label="false")
        page.click("#step-button")
        expect(page.locator("#observation-text")).to_have_text('{"choice": 2, "note": "", "enabled": false}')
        page.select_option("#step-enabled", label="(not set)")
        page.fill("#step-note", "n")
        page.click("#step-button")
        expect(page.locator("#observation-text")).to_have_text('{"choice": 2, "note": "n", "enabled": null}')


def test_a_full_server_refuses_the_page_clearly(page: Page) -> None:
    with serve("echo", max_concurrent_envs=1, capacity_wait_s=0) as url:
        with EnvClient(url).sync() as holder:
            holder.reset()
            open_page(page, url)
            page.click("#reset-button")
            expect(page.locator("#reset-error")).to_contain_text("CAPACITY_REACHED: server at capacity: 1/1 sessions open")
            expect(page.locator("#session-status")).to_have_text("session ended: server at capacity (close code 1013)")
        page.click("#reset-button")   # the slot is free again
        expect(page.locator("#session-status")).to_have_text("session open")
        expect(page.locator("#reset-error")).to_be_hidden()


def test_untrusted_text_is_shown_as_text(page: Page, echo_url: str) -> None:
    open_page(page, echo_url)
    page.click("#reset-button")
    attack = '<img src=x onerror="window.pwned=1"><b>bold</b>'
    page.fill("#step-message", attack)
    page.click("#step-button")
    expect(page.locator("#observation-text")).to_have_text(attack)
    assert page.locator("main img, main b").count() == 0
    assert page.evaluate("() => window.pwned") is None


def test_garbage_from_the_page_leaves_the_server_and_other_sessions_playing(page: Page, wordle_url: str) -> None:
    with EnvClient(wordle_url).sync() as other:
        other.reset(word="crane")
        open_page(page, wordle_url)
        page.click("#reset-button")
        page.click("#raw-card summary")
        for garbage, code in [("{not json", "INVALID_JSON"), ('{"type": "launch"}', "UNKNOWN_TYPE"),
                              ("[1, 2, 3]", "VALIDATION_ERROR"), ('{"type": "step", "data": {"nope": 1}}', "VALIDATION_ERROR"),
                              ('{"type": "call", "data": {"tool": "rm"}}', "UNKNOWN_TOOL")]:
            page.fill("#raw-frame", garbage)
            page.click("#raw-button")
            expect(page.locator("#raw-error")).to_contain_text(f"{code}: ")
        page.fill("#raw-frame", '{"type": "state"}')
        page.click("#raw-button")
        expect(page.locator("#raw-error")).to_be_hidden()
        expect(page.locator("#raw-reply")).to_contain_text('"type": "state"')

        page.fill("#tool-guess-guess", "[slate]")   # the page's own session plays on
        page.click("#call-guess")
        expect(page.locator("#observation-text")).to_contain_text("You submitted [slate]")
        assert other.call("guess", guess="[crane]").reward == 1.0   # and so does everyone else's
    assert httpx.get(wordle_url + "/health", trust_env=False).json()["status"] == "healthy"


def test_a_session_the_server_ended_is_not_silently_replaced(page: Page) -> None:
    with serve("echo", max_concurrent_envs=2, session_timeout_s=0.5) as url:
        open_page(page, url)
        page.click("#reset-button")
        ended = "idle timeout: no message for 0.5s (close code 4408)"
        expect(page.locator("#session-status")).to_have_text(f"session ended: {ended}", timeout=15_000)
        page.fill("#step-message", "still there?")
        page.click("#step-button")
        expect(page.locator("#step-error")).to_have_text(f"the session ended ({ended}); press Reset to start a new one")
        page.click("#reset-button")   # a reset starts a new session, as EnvClient does
        expect(page.locator("#session-status")).to_have_text("session open")
        page.click("#step-button")
        expect(page.locator("#observation-text")).to_have_text("still there?")


def test_a_server_with_an_api_key_is_played_after_the_key_is_typed_in(page: Page) -> None:
    """The page itself loads without a key; typed in, the key reaches every document and the WebSocket (as a
    session cookie, since browsers cannot set WebSocket headers), never the URL or lasting storage."""
    sockets: list[str] = []
    keyed: dict[str, str | None] = {}
    page.on("websocket", lambda socket: sockets.append(socket.url))
    page.on("request", lambda request: keyed.__setitem__(request.url.split("/", 3)[3], request.headers.get("x-api-key")))
    with serve("echo", max_concurrent_envs=8, api_keys=["s3cret key"]) as url:
        page.goto(url + "/web")
        expect(page.locator("body")).to_contain_text("enter the server's API key")
        page.fill("#api-key", "s3cret key")
        page.press("#api-key", "Enter")   # `change`: the documents are fetched again, with the key, and the view rebuilt
        page.click("#reset-button")
        expect(page.locator("#session-status")).to_have_text("session open")
        page.fill("#step-message", "keyed")
        page.click("#step-button")
        expect(page.locator("#observation-text")).to_have_text("keyed")
        for path in ("metadata", "schema", "tools", "web/reset-arguments", "splits", "tasks"):
            assert keyed[path] == "s3cret key", path
        assert "s3cret" not in sockets[-1] and "key" not in sockets[-1].split("?", 1)[1]
        page.reload()   # kept for the browser tab's session, not written to disk
        expect(page.locator("#api-key")).to_have_value("s3cret key")
        assert page.evaluate("() => localStorage.length") == 0
        page.fill("#api-key", "wrong")
        page.press("#api-key", "Enter")
        expect(page.locator("body")).to_contain_text("HTTP 401")


def load_transcripts(page: Page, *paths: Path) -> None:
    page.set_input_files("#transcript-files", [str(path) for path in paths])


def test_replay_shows_two_models_side_by_side(page: Page, wordle_url: str, transcripts: tuple[Path, Path]) -> None:
    solver_file, random_file = transcripts
    page.goto(wordle_url + "/web#replay")
    load_transcripts(page, solver_file, random_file)
    expect(page.locator("#loaded-files li")).to_have_text(["wordle-solver.jsonl — 3 games", "wordle-random.jsonl — 3 games"])
    expect(page.locator("#game-list button.game")).to_have_count(3)
    expect(page.locator("#compare-title")).to_have_text('wordle · test #0 · {"secret_index":0}')
    expect(page.locator(".column-head .model")).to_have_text(["policy:solver", "policy:random"])
    heads = page.locator(".column-head")
    expect(heads.nth(0)).to_contain_text("reward 1")
    expect(heads.nth(0)).to_contain_text("won 1")
    expect(heads.nth(1)).to_contain_text("won 0")
    solver = [json.loads(line) for line in solver_file.read_text().splitlines()]
    random = [json.loads(line) for line in random_file.read_text().splitlines()]
    # turns are laid out row by row: solver's turn n beside random's turn n
    cells = page.locator(".compare-grid > .turn")
    rows = max(len(solver[0]["turns"]), len(random[0]["turns"]))
    expect(cells).to_have_count(2 * rows)
    expect(cells.nth(0)).to_contain_text(f'#1guess({{"guess":"{solver[0]["turns"][0]["arguments"]["guess"]}"}})')
    expect(cells.nth(1)).to_contain_text(f'#1guess({{"guess":"{random[0]["turns"][0]["arguments"]["guess"]}"}})')
    expect(cells.nth(1)).to_contain_text(random[0]["turns"][0]["result"].strip().splitlines()[-1])
    last_solver = 2 * (len(solver[0]["turns"]) - 1)
    expect(cells.nth(last_solver)).to_contain_text("done")

    summary = page.locator("#replay-summary tbody tr")
    expect(summary.nth(0)).to_contain_text("policy:solver")
    assert summary.nth(0).locator("td").all_text_contents()[:6] == ["policy:solver", "3", "3", "0", "1", "3"]

    page.locator("#game-list button.game").nth(2).click()
    expect(page.locator("#compare-title")).to_have_text(f'wordle · test #2 · {{"secret_index":{solver[2]["task"]["secret_index"]}}}')
    page.fill("#game-filter", "#1")
    expect(page.locator("#game-list button.game")).to_have_count(1)


def test_replay_files_dropped_on_the_page(page: Page, wordle_url: str, transcripts: tuple[Path, Path]) -> None:
    solver_file, random_file = transcripts
    page.goto(wordle_url + "/web#replay")
    page.evaluate("""([solver, random]) => {
        const transfer = new DataTransfer();
        transfer.items.add(new File([solver], "solver.jsonl"));
        transfer.items.add(new File([random], "random.jsonl"));
        document.getElementById("drop-zone").dispatchEvent(new DragEvent("drop", {dataTransfer: transfer, bubbles: true}));
    }""", [solver_file.read_text(), random_file.read_text()])
    expect(page.locator(".column-head .model")).to_have_text(["policy:solver", "policy:random"])
    page.click("#clear-files")
    expect(page.locator(".column-head")).to_have_count(0)


def test_bad_and_hostile_transcripts_are_reported_and_shown_as_text(page: Page, wordle_url: str, tmp_path: Path,
                                                                     transcripts: tuple[Path, Path]) -> None:
    solver_file = transcripts[0]
    attack = '<img src=x onerror="window.pwned=1">'
    game = {"format": "envkit.transcript/1", "model": attack, "env": "wordle", "split": "test", "task_index": 0,
            "task": {"secret_index": 0}, "messages": [{"role": "user", "content": attack}],
            "turns": [{"tool": attack, "arguments": {"guess": attack}, "result": f"<b>{attack}</b>", "reward": 0.0,
                       "done": False, "error": attack}],
            "reward": 0.0, "done": False, "lost": True, "metrics": {attack: 1}}
    hostile = tmp_path / "hostile.jsonl"
    hostile.write_text("\n".join([json.dumps(game), "{not json", "[1, 2]", json.dumps({"model": "x"}),
                                  json.dumps({**game, "format": "other/9", "model": "older"})]) + "\n")
    page.goto(wordle_url + "/web#replay")
    load_transcripts(page, hostile, solver_file)
    expect(page.locator("#transcript-problems li")).to_have_count(4)
    problems = page.locator("#transcript-problems li").all_text_contents()
    assert problems[0].startswith("hostile.jsonl line 2: not JSON (")
    assert problems[1:] == ["hostile.jsonl line 3: expected a JSON object (one game per line)",
                            'hostile.jsonl line 4: no "turns" list; is this an envkit.transcript/1 transcript?',
                            'hostile.jsonl line 5: format "other/9", expected "envkit.transcript/1"; shown as far as it fits']
    expect(page.locator(".column-head .model")).to_have_text([attack, "older", "policy:solver"])
    expect(page.locator(".column-head").first).to_contain_text("session lost")
    expect(page.locator(".compare-grid .turn-error").first).to_have_text(attack)
    expect(page.locator(".compare-grid .turn-result").first).to_have_text(f"<b>{attack}</b>")
    assert page.locator("main img, main b").count() == 0
    assert page.evaluate("() => window.pwned") is None
