"""The README and the pages under docs/ are kept true here: their examples are executed, served and played, their
links resolve, and the module paths and codes they name exist."""

from __future__ import annotations

import functools
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

from envkit import EnvClient, create_app
from envkit.protocol import CloseCode, ErrorCode
from envkit.testing import ServedProcess, running_server

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: Every page whose links and names are checked: the README, docs/*.md and the benchmarks' README.
PAGES = [README, *sorted(DOCS.glob("*.md")), ROOT / "benchmarks" / "README.md"]
FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)


def test_readme_example_environment_serves_and_plays() -> None:
    namespace: dict = {}
    exec(compile(readme_example("class GuessEnvironment"), str(README), "exec"), namespace)  # noqa: S102
    app = create_app(namespace["GuessEnvironment"], namespace["GuessAction"], namespace["GuessObservation"],
                     max_concurrent_envs=4)
    with running_server(app) as url, EnvClient(url).sync() as env:
        assert env.reset(seed=9).observation["hint"].startswith("Guess a number")
        assert env.step({"number": 1}).observation["hint"] == "higher"
        result = env.call("guess", number=10)
        assert (result.text, result.reward, result.done) == ("Correct!", 1.0, True)
        assert [tool["function"]["name"] for tool in env.tools()] == ["guess"]


def code_block(page: Path, language: str, marker: str) -> str:
    """The `language` block of `page` that holds `marker`."""
    blocks = re.findall(rf"```{language}\n(.*?)```", page.read_text(), flags=re.S)
    found = [block for block in blocks if marker in block]
    assert found, f"{page.relative_to(ROOT)} has no {language} block with {marker!r}"
    return found[0]


def readme_example(name: str) -> str:
    """The README's python block that defines `name`."""
    return code_block(README, "python", name)


def test_readme_example_environment_honours_seed_zero_and_has_a_state_before_reset() -> None:
    namespace: dict = {}
    exec(compile(readme_example("class GuessEnvironment"), str(README), "exec"), namespace)  # noqa: S102
    app = create_app(namespace["GuessEnvironment"], namespace["GuessAction"], namespace["GuessObservation"],
                     max_concurrent_envs=4)
    with running_server(app) as url, EnvClient(url).sync() as env:
        assert env.state()["step_count"] == 0                          # before any reset: no AttributeError
        env.reset(seed=0)
        assert env.step({"number": 1}).observation["hint"] == "Correct!"   # seed 0 is a seed, not "no seed"
        env.reset()
        assert env.step({"number": 1}).observation["hint"] == "higher"


def test_readme_example_environment_saved_as_a_module_validates_and_evaluates(tmp_path: Path) -> None:
    """As the README says: saved as guess.py, `envkit validate` and `envkit eval` take it as module:Class from
    the folder it is in (the installed console script, which does not put that folder on sys.path itself)."""
    (tmp_path / "guess.py").write_text(readme_example("class GuessEnvironment"))
    envkit = str(Path(sys.executable).with_name("envkit"))
    checked = subprocess.run([envkit, "validate", "guess:GuessEnvironment"], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[-1] == "guess:GuessEnvironment: valid (4 checks, 0 failed, 0 warnings)"
    played = subprocess.run([envkit, "eval", "--env", "guess:GuessEnvironment", "--policy", "random", "--json"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert played.returncode == 0, played.stderr
    assert json.loads(played.stdout)["rows"][0]["episodes"] == 30


def test_mcp_page_curl_lines_run_as_pasted() -> None:
    """The curl block of docs/mcp.md, run by bash as written against `envkit serve echo` (only the port differs):
    the episode id of the second call is the one the first reply handed out."""
    block = code_block(DOCS / "mcp.md", "bash", "localhost:8001/mcp")
    with ServedProcess("echo") as served:
        port = served.url.rsplit(":", 1)[1]
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.replace("localhost:8001", f"localhost:{port}")],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    decoder, replies, at = json.JSONDecoder(), [], 0
    while at < len(done.stdout.rstrip()):   # curl's replies end without a newline
        reply, at = decoder.raw_decode(done.stdout, at)
        replies.append(reply)
        at += len(done.stdout[at:]) - len(done.stdout[at:].lstrip())
    first, second, third = replies
    episode = first["result"]["structuredContent"]["episode_id"]
    assert second["result"]["structuredContent"]["episode_id"] == episode
    assert second["result"]["content"][0]["text"] == "hi" and not second["result"]["isError"]
    assert third["result"]["session_id"]


def test_a_rerun_output_folder_is_ignored_by_git() -> None:
    """The README says a rerun of `envkit train` writes envkit-train-2/, -3/, ...: none of them is committed."""
    for folder in ("envkit-train", "envkit-train-2", "envkit-train-13"):
        done = subprocess.run(["git", "check-ignore", "-q", f"{folder}/metrics.jsonl"], cwd=ROOT)
        assert done.returncode == 0, f"{folder}/ is not ignored"


def test_ci_runs_the_readme_test_command() -> None:
    commands = re.findall(r"```bash\n(python3 -m venv .*?)\n```", README.read_text())
    test_command = next(command for command in commands if "pytest" in command)
    ci_script = (ROOT / ".ci" / "run").read_text()
    assert test_command + " || exit $?" in ci_script.splitlines()


def test_training_page_python_snippet_runs_against_a_served_wordle(monkeypatch, tmp_path: Path) -> None:
    """The "From Python" block of docs/training.md, run as written against a real wordle server. Only the trainers (TRL's and envkit's)
    and TRL's config are swapped for recorders: `GRPOTrainer` would load Qwen3 from the Hugging Face Hub, which
    cannot be reached here, and `GRPOConfig` refuses its bf16 default on a machine without a GPU."""
    import trl

    import envkit.train.rollouts
    from envkit.app.targets import app_from_environment, resolve_target

    made: dict = {}

    class Recorder:
        def __init__(self, **kwargs: object) -> None:
            made.update(kwargs)

    monkeypatch.setattr(trl, "GRPOTrainer", Recorder)
    monkeypatch.setattr(envkit.train.rollouts, "GRPOTrainer", Recorder)
    monkeypatch.setattr(trl, "GRPOConfig", dict)
    monkeypatch.chdir(tmp_path)
    block = code_block(DOCS / "training.md", "python", "environment_factory(")
    wordle = resolve_target("wordle").env_class
    with running_server(app_from_environment(wordle, env_name="wordle", max_concurrent_envs=4)) as url:
        exec(compile(block.replace("http://127.0.0.1:8001", url), str(DOCS / "training.md"), "exec"), {})  # noqa: S102
        rows, factory, reward = made["train_dataset"], made["environment_factory"], made["reward_funcs"]
        assert made["args"] == {"max_tool_calling_iterations": 6}
        assert len(rows) > 0 and isinstance(rows[0]["prompt"], list)
        env = factory()
        assert "Wordle" in env.reset(**rows[0])
        env.guess(guess="[crane]")
        assert reward(environments=[env]) == [0.0]   # the game goes on: no reward yet
        env._close()


def test_readme_reads_in_ten_minutes() -> None:
    """Everything past what envkit is, the two commands and one example per task lives under docs/."""
    lines = len(README.read_text().splitlines())
    assert lines < 300, f"README.md has {lines} lines; move reference material to a page under docs/"


def prose(page: Path) -> str:
    """The page without its fenced code blocks (whose `#` lines are comments and `[..](..)` code, not markdown)."""
    return FENCE.sub("", page.read_text())


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lowercased, punctuation dropped, spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a markdown page's headings, a repeated heading's as GitHub numbers them (-1, -2, ...)."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", prose(page), flags=re.M):
        base, count = slug(heading), 0
        while (anchor := base if count == 0 else f"{base}-{count}") in found:
            count += 1
        found.add(anchor)
    return found


def relative_links(page: Path) -> list[str]:
    """The targets of the page's links and images that point inside the repository."""
    text = re.sub(r"`[^`\n]*`", "", prose(page))
    targets = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
    return [target for target in targets if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of `page` whose file is missing or whose #anchor names no heading there."""
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (file.suffix != ".md" or anchor not in anchors(file)):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(root)}")
    return broken


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    broken = {str(page.relative_to(ROOT)): found for page in PAGES if (found := broken_links(page))}
    assert not broken, broken


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    """The check above, on a page with good links and two broken ones (so it cannot pass by finding none); links in
    code spans and fences, and `#` lines in fences, are not markdown."""
    (tmp_path / "other.md").write_text("# A `code` heading: yes\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-code-heading-yes) [second](other.md#twice-1) [self](#top) ![img](other.md)\n"
                    "# Top\n[gone](missing.md) [wrong](other.md#nowhere) `[code](ignored.md)`\n"
                    "```bash\n# not-a-heading [x](in-a-fence.md)\n```\n[fenced](#not-a-heading)\n")
    assert broken_links(page, root=tmp_path) == [
        "missing.md: no such file", "other.md#nowhere: no heading #nowhere in other.md",
        "#not-a-heading: no heading #not-a-heading in page.md"]


def test_the_readme_links_every_docs_page() -> None:
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in relative_links(README)}
    unlinked = [page.name for page in DOCS.glob("*.md") if page.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def named_modules(page: Path) -> set[str]:
    """The dotted `envkit.…` names and the source paths (`src/envkit/…`, `envkit/….py`) in the page's code spans."""
    spans = re.findall(r"`([^`\n]+)`", prose(page))
    dotted = {name for span in spans for name in re.findall(r"(?<![\w/.-])envkit(?:\.\w+)+(?![\w/])", span)}
    paths = {"envkit/" + path for span in spans for path in re.findall(r"(?<![\w.-])(?:src/)?envkit/([\w/.-]+)", span)}
    return dotted | paths


@functools.cache
def source_text() -> str:
    return "\n".join(path.read_text() for path in sorted((ROOT / "src").rglob("*.py")))


def missing_module(name: str) -> str | None:
    """Why `name` (a dotted path or a file path under src/) names nothing in the source tree, or None."""
    if "/" in name:
        return None if (ROOT / "src" / name).exists() else "no such file under src/"
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        folder = ROOT / "src" / Path(*parts[:end])
        if folder.with_suffix(".py").is_file() or (folder / "__init__.py").is_file():
            break
    module, attributes = ".".join(parts[:end]), parts[end:]
    if not attributes:
        return None
    if re.search(rf"[\"']{re.escape(name)}[\"']", source_text()):
        return None   # a name the code uses as a string (a scope extension, a logger)
    value = importlib.import_module(module)
    for attribute in attributes:
        if not hasattr(value, attribute):
            return f"{module} has no {'.'.join(attributes)}"
        value = getattr(value, attribute)
    return None


def test_module_paths_named_on_the_pages_exist() -> None:
    """Every module, attribute and source file a page names exists under its current path."""
    wrong = {f"{page.relative_to(ROOT)}: {name}": why for page in PAGES for name in sorted(named_modules(page))
             if (why := missing_module(name)) is not None}
    assert not wrong, wrong


def test_the_module_path_check_rejects_old_and_missing_names() -> None:
    assert missing_module("envkit.metrics.ServerMetrics") == "envkit has no metrics.ServerMetrics"
    assert missing_module("envkit.core.metrics.NoSuchThing") == "envkit.core.metrics has no NoSuchThing"
    assert missing_module("envkit/server.py") == "no such file under src/"
    assert missing_module("envkit.core.metrics.ServerMetrics") is None


def test_the_protocol_page_lists_every_close_code_and_error_code() -> None:
    page = (DOCS / "protocol.md").read_text()
    listed = {int(code) for code in re.findall(r"^\| (\d{4}) \|", page, flags=re.M)}
    assert listed == {int(code) for code in CloseCode}
    assert [code for code in vars(ErrorCode) if code.isupper() and f"`{code}`" not in page] == []


def test_the_layout_page_lists_each_layer_folder_as_it_is() -> None:
    """docs/layout.md's tables name, for each folder of src/envkit, exactly the modules in it; and it names every
    module at the top."""
    page = (DOCS / "layout.md").read_text()
    top = [path.name for path in (ROOT / "src" / "envkit").glob("*.py") if f"`{path.name}`" not in page]
    assert top == ["__init__.py"], f"modules at the top of src/envkit that docs/layout.md does not name: {top}"
    rows = re.findall(r"^\| `(\w+)/` \| (`.+?`) \|", page, flags=re.M)
    assert len(rows) >= 10
    for folder, cell in rows:
        listed = set(re.findall(r"`([\w/]+)`", cell))
        there = {path.stem for path in (ROOT / "src" / "envkit" / folder).glob("*.py") if path.stem != "__init__"}
        there |= {f"{path.name}/" for path in (ROOT / "src" / "envkit" / folder).iterdir()
                  if path.is_dir() and not path.name.startswith("__")}
        assert listed == there, f"{folder}/: the page lists {sorted(listed - there)}, misses {sorted(there - listed)}"


def sentences(page: Path) -> list[str]:
    """The page's prose sentences (tables and headings left out), whitespace made single."""
    text = "\n".join(line for line in prose(page).splitlines() if not line.lstrip().startswith(("|", "#")))
    return [" ".join(part.split()) for part in re.split(r"(?<=[.:;])\s+(?=[A-Z`(])|\n\s*\n", text) if part.strip()]


def repeated_sentences(page: Path) -> list[str]:
    """Sentences of six words or more that come twice, or whose first copy is cut short (a start of another)."""
    found = sentences(page)
    return sorted({one for index, one in enumerate(found) if len(one.split()) >= 6
                   and any(other != one and other.startswith(one) or other == one
                           for other in found[index + 1:])})


def test_no_page_repeats_a_sentence(tmp_path: Path) -> None:
    assert {page.name: repeated for page in PAGES if (repeated := repeated_sentences(page))} == {}
    cut = tmp_path / "cut.md"
    cut.write_text("The socket closes with 1001 at shutdown and\n\nThe socket closes with 1001 at shutdown and every "
                   "environment's close() runs.\n")
    assert repeated_sentences(cut)   # the check itself finds a truncated first copy


def split_tables(page: Path) -> list[str]:
    """Table rows separated from the table above by a blank line (markdown then starts a second, headless table)."""
    lines = [*prose(page).splitlines(), ""]
    return [lines[index + 1] for index in range(1, len(lines) - 2)
            if not lines[index].strip() and lines[index - 1].startswith("|") and lines[index + 1].startswith("|")
            and not re.match(r"\|\s*:?-{3}", lines[index + 2])]   # a header row and its rule begin a table of its own


def test_no_table_is_split_by_a_blank_line(tmp_path: Path) -> None:
    assert {page.name: rows for page in PAGES if (rows := split_tables(page))} == {}
    broken = tmp_path / "broken.md"
    broken.write_text("| a | b |\n| --- | --- |\n| 1 | 2 |\n\n| 3 | 4 |\n\n| c | d |\n| --- | --- |\n")
    assert split_tables(broken) == ["| 3 | 4 |"]


def test_the_readme_and_train_help_give_the_main_job_the_same_time() -> None:
    from envkit.cli.train import command

    readme = re.search(r"offline, in about (\w+ \w+(?: \w+)?) after the", " ".join(README.read_text().split()))
    helped = re.search(r"offline, in about (\w+ \w+(?: \w+)?)\.", " ".join((command.help or "").split()))
    assert readme and helped and readme.group(1) == helped.group(1), (readme, helped)


def test_the_readme_lists_every_file_the_main_job_writes() -> None:
    """Every file name the trainer writes into its run folder; `eval_transcripts.jsonl` only with --eval-games."""
    written = set(re.findall(r'"(\w+\.(?:jsonl|csv|png))"', "".join(path.read_text() for path in
                                                                      (ROOT / "src/envkit/train").glob("*.py"))))
    listed = re.search(r"Outputs land in `envkit-train/` \((.*?)\)", " ".join(README.read_text().split())).group(1)
    assert written - {"eval_transcripts.jsonl"} <= set(re.findall(r"`([\w.]+)`", listed)), listed
