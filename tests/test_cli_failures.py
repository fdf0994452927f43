"""What a user sees when a command cannot do its job: one line saying what is wrong and what to do, an exit
code, no traceback. Real subprocesses throughout.

The Hugging Face Hub cannot be reached from here, so `envkit train --model owner/name` is tested three ways:
with HF_HUB_OFFLINE=1, against a stand-in Hub on 127.0.0.1 that answers "no such repository" as the real one
does (HTTP 404 with `X-Error-Code: RepoNotFound`), and against a port where nothing listens.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import subprocess_env

from envkit.testing import free_port


def envkit(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envkit.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env or subprocess_env(), cwd=cwd)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


# -- envkit train --model ------------------------------------------------------------------------------------


class _NoSuchRepo(BaseHTTPRequestHandler):
    """The Hub's answer to a model it does not have."""

    requests: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).requests.append(self.path)
        body = b'{"error":"Repository not found"}'
        self.send_response(404)
        self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stand_in_hub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoSuchRepo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def hub_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """An empty Hugging Face cache, and no offline switch unless given."""
    env = subprocess_env(HF_HOME=str(tmp_path / "hf-home"), **extra)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if name not in extra:
            env.pop(name, None)
    return env


def test_an_unknown_hub_model_offline_fails_at_once_naming_what_was_tried(tmp_path: Path) -> None:
    started = time.monotonic()
    done = envkit("train", "--model", "nosuch/model-xyz", "--output-dir", str(tmp_path / "out"),
                  env=hub_env(tmp_path, HF_HUB_OFFLINE="1"))
    line = one_line(done)
    assert done.returncode == 2 and time.monotonic() - started < 60
    assert line.startswith("envkit train: error: --model nosuch/model-xyz: not a local folder, and not in the "
                           "Hugging Face cache while HF_HUB_OFFLINE is set, so the Hub was not asked")
    assert "hf download nosuch/model-xyz" in line
    assert "serving" not in done.stdout + done.stderr and not (tmp_path / "out").exists()


def test_an_unknown_hub_model_is_reported_from_the_hubs_answer(tmp_path: Path, stand_in_hub: str) -> None:
    _NoSuchRepo.requests.clear()
    done = envkit("train", "--model", "nosuch/model-xyz", env=hub_env(tmp_path, HF_ENDPOINT=stand_in_hub))
    line = one_line(done)
    assert done.returncode == 2 and "has no model of that name" in line and stand_in_hub in line
    asked = [path for path in _NoSuchRepo.requests if path.startswith("/api/models/")]
    assert asked == ["/api/models/nosuch/model-xyz"]  # asked once, no retries


def test_an_unreachable_hub_is_named_without_retries(tmp_path: Path) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    done = envkit("train", "--model", "nosuch/model-xyz", env=hub_env(tmp_path, HF_ENDPOINT=nowhere))
    line = one_line(done)
    assert done.returncode == 2 and f"the Hub ({nowhere}) could not be reached" in line


@pytest.mark.parametrize("model, message", [
    ("./does-not-exist", "no such folder"),
    ("bad id!!", "neither a folder nor a Hub id"),
])
def test_a_model_path_that_is_not_there_says_so(tmp_path: Path, model: str, message: str) -> None:
    done = envkit("train", "--model", model, env=hub_env(tmp_path, HF_HUB_OFFLINE="1"), cwd=tmp_path)
    line = one_line(done)
    assert done.returncode == 2 and message in line and "HFValidationError" not in line


def test_eval_checks_its_models_the_same_way(tmp_path: Path) -> None:
    done = envkit("eval", "--env", "echo", "--model", "nosuch/model-xyz", env=hub_env(tmp_path, HF_HUB_OFFLINE="1"))
    assert done.returncode == 2 and "HF_HUB_OFFLINE is set, so the Hub was not asked" in one_line(done)


def test_a_folder_without_a_model_says_so(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    done = envkit("train", "--model", str(tmp_path / "empty"), env=hub_env(tmp_path, HF_HUB_OFFLINE="1"))
    assert done.returncode == 2 and "the folder has no config.json" in one_line(done)


def test_train_against_a_server_that_does_not_speak_ors_says_so(tmp_path: Path, stand_in_hub: str) -> None:
    """`--protocol ors` against a server without the Open Reward Standard (the stand-in Hub, which answers every
    GET with a JSON 404): one line naming the route that failed, not a traceback."""
    done = envkit("train", "--env-url", stand_in_hub, "--protocol", "ors", "--max-steps", "1",
                  "--output-dir", str(tmp_path / "out"))
    assert done.returncode == 1
    line = one_line(done)
    assert "does not answer the Open Reward Standard's GET /list_environments" in line and "404" in line


def test_a_web_server_answering_html_is_one_line_too(tmp_path: Path) -> None:
    """`--protocol ors` against Python's own file server, whose 404 is a multi-line HTML page: one line still."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        done = envkit("train", "--env-url", f"http://127.0.0.1:{server.server_port}", "--protocol", "ors",
                      "--max-steps", "1", "--output-dir", str(tmp_path / "out"), cwd=tmp_path)
    finally:
        server.shutdown()
        server.server_close()
    line = one_line(done)
    assert done.returncode == 1 and "GET /list_environments" in line and "<" not in line, line


# -- envkit serve --------------------------------------------------------------------------------------------


def test_serve_on_a_busy_port_says_which_and_what_to_do() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = envkit("serve", "echo", "--port", str(port))
    assert done.returncode == 1 and "Application startup complete" not in done.stdout + done.stderr
    line = one_line(done)
    assert f"port {port} on 127.0.0.1 is already in use" in line and "--port 0" in line


@pytest.mark.parametrize("source, message", [
    ("x = (\n", "cannot import 'broken_module': syntax error in "),
    ("import no_such_package_xyz\n", "cannot import 'broken_module': it imports 'no_such_package_xyz', which is "
                                     "not installed"),
    ("raise RuntimeError('boom')\n", "cannot import 'broken_module': importing it raised RuntimeError: boom "
                                     "(<tmp>/broken_module.py, line 1: raise RuntimeError('boom')"),
])
def test_serve_a_module_that_fails_to_import_is_one_line(tmp_path: Path, source: str, message: str) -> None:
    (tmp_path / "broken_module.py").write_text(source)
    env = subprocess_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    done = envkit("serve", "broken_module:Environment", env=env)
    assert done.returncode == 2 and message.replace("<tmp>", str(tmp_path)) in one_line(done)


# -- quiet by default ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("level, logged", [("info", False), ("debug", True)])
def test_serve_logs_a_line_per_websocket_handshake_only_at_debug(level: str, logged: bool) -> None:
    from envkit import EnvClient
    from envkit.testing import ServedProcess

    with ServedProcess("echo", "--log-level", level, env=subprocess_env()) as served:
        for _ in range(3):
            with EnvClient(served.url).sync() as env:
                env.reset()
        served.terminate()
    output = "".join(served.output)
    assert ('"WebSocket /ws" [accepted]' in output) is logged, output
    assert "Application startup complete" in output   # the rest of uvicorn's INFO log is still there
