#!/usr/bin/env python3
"""Take the screenshots of the /web page in docs/web.md: a Wordle game in progress, and a replay of two models.

Serves Wordle on 127.0.0.1, plays a few guesses through the page's forms in headless Chromium, then
loads into the replay view what `envkit eval` writes for Wordle's solver and random policies.

    PYTHONPATH=src python scripts/web_screenshots.py [--chromium /usr/bin/chromium] [--out docs]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from envkit.app.targets import app_from_environment, resolve_target
from envkit.testing import running_server

ROOT = Path(__file__).resolve().parents[1]


def write_transcripts(folder: Path) -> list[Path]:
    """Three Wordle games of each scripted policy, written by `envkit eval --transcripts`."""
    paths = []
    for policy in ("solver", "random"):
        path = folder / f"wordle-{policy}.jsonl"
        subprocess.run([sys.executable, "-m", "envkit.cli", "eval", "--env", "wordle", "--policy", policy, "--games", "3",
                        "--transcripts", str(path)], check=True, capture_output=True)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default=shutil.which("chromium"), help="Chromium binary [default: chromium on PATH]")
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="folder for the PNG files [default: docs]")
    args = parser.parse_args()
    if not args.chromium:
        parser.error("no Chromium found: apt-get install -y chromium, or pass --chromium PATH")
    args.out.mkdir(parents=True, exist_ok=True)

    target = resolve_target("wordle")
    app = app_from_environment(target.env_class, env_name="wordle")
    with tempfile.TemporaryDirectory() as folder, running_server(app) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium)
        page = browser.new_page(viewport={"width": 1360, "height": 1020})

        page.goto(url + "/web")
        page.select_option("#task-split", "test")
        page.fill("#task-index", "3")
        page.click("#use-task")
        expect(page.locator("#task-preview")).to_contain_text("test #3")
        page.click("#reset-button")
        for number, guess in enumerate(["[store]", "[plain]", "[bunch]"], start=1):
            page.fill("#tool-guess-guess", guess)
            page.click("#call-guess")
            expect(page.locator("#history .turn")).to_have_count(number + 1)
        page.fill("#tool-guess-guess", "[pinch]")   # the next guess, about to be sent
        page.screenshot(path=args.out / "web-play.png")

        page.goto(url + "/web#replay")
        page.set_input_files("#transcript-files", [str(path) for path in write_transcripts(Path(folder))])
        page.locator("#game-list button.game").nth(1).click()
        expect(page.locator(".column-head .model")).to_have_count(2)
        page.screenshot(path=args.out / "web-replay.png", full_page=True)
        browser.close()
    print(f"wrote {args.out / 'web-play.png'} and {args.out / 'web-replay.png'}")


if __name__ == "__main__":
    main()
