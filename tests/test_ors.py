"""The Open Reward Standard routes of an envkit server, over real HTTP on 127.0.0.1 (httpx; SSE read by hand).

The openreward SDK and TRL's OpenRewardSpec drive these routes in tests/test_ors_clients.py; here every
route, refusal and edge case is checked on the wire: the error shape, 404/410/503, pings while a call
runs, chunked results, replay by task_id, reaping, and that /ws sessions share the same pool.
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import Any, Iterator

import httpx
import orjson
import pytest

from envkit import Action, EnvClient, Environment, Observation, State, create_app, tool
from envkit.errors import CapacityError
from envkit.testing import running_server
from envkit.surfaces import ors


class NoteAction(Action):
    text: str = ""


class NoteObservation(Observation):
    note: str = ""


class NotesEnvironment(Environment[NoteAction, NoteObservation, State]):
    """Notes for tests: a task names a topic; tools write, wait, shout and wreck (raises)."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUN_INLINE = False
    TASKS = {"train": tuple({"topic": f"topic {i}"} for i in range(5)), "test": ({"topic": "held out"},)}
    written: list[str] = []
    live: weakref.WeakSet[NotesEnvironment] = weakref.WeakSet()

    @classmethod
    def task_prompt(cls, task: dict[str, Any]) -> str | None:
        return f"Write about {task.get('topic', 'anything')}."

    def reset(self, seed: int | None = None, episode_id: str | None = None, topic: str = "",
              **kwargs: Any) -> NoteObservation:
        if topic == "explode":
            raise ValueError("no such topic")
        self.topic, self.count = topic, 0
        type(self).live.add(self)
        return NoteObservation(note=f"Notebook open on {topic}.")

    def step(self, action: NoteAction) -> NoteObservation:
        return self.write(action.text)

    @property
    def state(self) -> State:
        return State(step_count=self.count)

    @tool
    def write(self, text: str) -> NoteObservation:
        """Write a note; the third one ends the episode.

        Args:
            text: What to write.
        """
        self.count += 1
        type(self).written.append(text)
        return NoteObservation(note=f"{self.topic}: {text}", reward=float(len(text)), done=self.count >= 3)

    @tool
    def wait(self, seconds: float) -> str:
        """Wait, then say so.

        Args:
            seconds: How long.
        """
        time.sleep(seconds)
        return f"waited {seconds}"

    @tool
    def shout(self, times: int) -> str:
        """Repeat a phrase with spaces in it.

        Args:
            times: How often.
        """
        return "".join(f"word {i} and more " for i in range(times))

    @tool
    def wreck(self) -> str:
        """Always raises."""
        raise RuntimeError("the tool broke")


def notes_app(**settings: Any) -> Any:
    return create_app(NotesEnvironment, NoteAction, NoteObservation, env_name="notes", **settings)


@pytest.fixture
def url() -> Iterator[str]:
    with running_server(notes_app(max_concurrent_envs=8)) as served:
        yield served


def sse(response: httpx.Response) -> list[tuple[str, str]]:
    """(event, data) pairs of an SSE body, comments as ("comment", text)."""
    events, event, data = [], None, []
    for line in response.text.split("\n"):
        if not line:
            if event:
                events.append((event, "\n".join(data)))
            event, data = None, []
        elif line.startswith(":"):
            events.append(("comment", line[1:].strip()))
        else:
            field, _, value = line.partition(":")
            if field == "event":
                event = value.strip()
            elif field == "data":
                data.append(value.lstrip())
    return events


def settled_sessions(http: httpx.Client) -> int:
    """Open sessions once closing ones have finished closing (bounded wait)."""
    for _ in range(100):
        active = http.get("/health").json()["active_sessions"]
        if active <= 1:
            break
        time.sleep(0.02)
    return active


def result(events: list[tuple[str, str]]) -> dict[str, Any]:
    """The JSON a call's `chunk` and `end` events carry, joined."""
    return orjson.loads("".join(data for kind, data in events if kind in ("chunk", "end")))


def open_session(http: httpx.Client, **body: Any) -> str:
    created = sse(http.post("/create_session"))
    assert created[0][0] == "task_id" and created[-1] == ("end", "")
    sid = created[0][1]
    reply = http.post("/create", headers={"X-Session-ID": sid}, json=body or {"split": "train", "index": 1})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"sid": sid}
    return sid


def call(http: httpx.Client, sid: str, name: str, path: str = "/call", **body: Any) -> dict[str, Any]:
    reply = http.post(path, headers={"X-Session-ID": sid}, json={"name": name, **body})
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream"), reply.text
    events = sse(reply)
    assert events[0][0] == "task_id" and events[-1][0] == "end"
    return result(events)


def refused(reply: httpx.Response, status: int, reason: str) -> str:
    assert reply.status_code == status, reply.text
    body = reply.json()
    assert body["ok"] is False and body["reason"] == reason and body["detail"] == body["error"]
    return body["error"]


def test_catalogue_bare_and_under_the_name(url: str) -> None:
    with httpx.Client(base_url=url) as http:
        for prefix in ("", "/notes"):
            assert http.get(f"{prefix}/splits").json() == [{"name": "train", "type": "train"},
                                                            {"name": "test", "type": "test"}]
            assert http.post(f"{prefix}/tasks", json={"split": "test"}).json() == {
                "tasks": [{"topic": "held out"}], "env_name": "notes"}
            assert http.post(f"{prefix}/num_tasks", json={"split": "train"}).json() == {"num_tasks": 5}
            assert http.post(f"{prefix}/task", json={"split": "train", "index": 2}).json() == {
                "task": {"topic": "topic 2"}, "env_name": "notes"}
            assert http.post(f"{prefix}/task_range", json={"split": "train", "start": -2}).json()["tasks"] == [
                {"topic": "topic 3"}, {"topic": "topic 4"}]
        assert http.get("/list_environments").json() == ["notes"]
        assert http.get("/version").json()["server"] == "envkit"
        ors_listing = http.get("/notes/tools").json()
        assert sorted(t["name"] for t in ors_listing["tools"]) == ["shout", "wait", "wreck", "write"]
        assert {t["name"]: t for t in ors_listing["tools"]}["write"]["input_schema"]["required"] == ["text"]
        # Bare GET /tools: envkit's listing for envkit's clients, the ORS listing for an ORS client's request.
        assert http.get("/tools").json()["tools"][0]["type"] == "function"
        assert http.get("/tools", headers={"X-Deployment": "notes"}).json() == ors_listing
        assert http.get("/metadata").json()["ors"]["served"] is True


def test_an_episode_prompt_calls_rewards_finish_and_delete(url: str) -> None:
    with httpx.Client(base_url=url) as http:
        sid = open_session(http, split="train", index=1)
        headers = {"X-Session-ID": sid}
        assert http.get("/prompt", headers=headers).json() == [
            {"type": "text", "text": "Write about topic 1.\n\nNotebook open on topic 1.", "detail": None}]
        assert http.get("/messages", headers=headers).json()[0]["role"] == "user"
        assert http.get("/task_tools", headers=headers).json() == http.get("/notes/tools").json()
        assert http.post("/ping", headers=headers).json() == {"status": "ok"}
        first = call(http, sid, "write", input={"text": "abc"})
        assert first == {"ok": True, "output": {"blocks": [{"type": "text", "text": "topic 1: abc", "detail": None}],
                                                "metadata": {"note": "topic 1: abc", "metadata": {}},
                                                "reward": 3.0, "finished": False}}
        assert call(http, sid, "write", path="/notes/call", input={"text": "de"})["output"]["reward"] == 2.0
        assert call(http, sid, "peek_not", input={})["reason"] == "not_found"
        last = call(http, sid, "write", input={"text": "f"})
        assert last["output"]["finished"] is True
        after = call(http, sid, "write", input={"text": "too late"})
        assert after["ok"] is False and after["reason"] == "episode_finished"
        assert "too late" not in NotesEnvironment.written
        # A task given as task_spec (reset arguments) instead of split and index.
        other = open_session(http, task_spec={"topic": "free"})
        assert "free" in http.get("/prompt", headers={"X-Session-ID": other}).json()[0]["text"]
        assert http.get("/health").json()["active_sessions"] == 2
        assert http.post("/delete", headers=headers).json() == {"sid": sid}
        assert http.post("/delete_session", headers={"X-Session-ID": other}).json() == {"sid": other}
        assert http.get("/health").json()["active_sessions"] == 0
        message = refused(http.post("/call", headers=headers, json={"name": "write", "input": {"text": "x"}}),
                          410, "session_ended")
        assert "deleted by the client" in message
        refused(http.get("/prompt", headers=headers), 410, "session_ended")
        assert http.post("/delete", headers=headers).json() == {"sid": sid}   # deleting twice is no error


def test_bad_input_gets_the_ors_error_shape_and_sessions_carry_on(url: str) -> None:
    with httpx.Client(base_url=url) as http:
        sid = open_session(http)
        headers = {"X-Session-ID": sid}
        assert "X-Session-ID" in refused(http.post("/call", json={"name": "write", "input": {}}), 400,
                                         "input_validation")
        assert "no session nope" in refused(http.post("/call", headers={"X-Session-ID": "nope"},
                                                      json={"name": "write", "input": {}}), 404, "not_found")
        refused(http.post("/ping", headers={"X-Session-ID": "nope"}), 404, "not_found")
        assert "tasks 0 to 4" in refused(http.post("/task", json={"split": "train", "index": 9}), 404, "not_found")
        assert "no split 'dev'" in refused(http.post("/tasks", json={"split": "dev"}), 404, "not_found")
        refused(http.post("/task", json={"split": "train", "index": "2"}), 400, "input_validation")
        refused(http.post("/tasks", content=b"{not json"), 400, "bad_input_shape")
        refused(http.post("/tasks", json=["train"]), 400, "bad_input_shape")
        fresh = sse(http.post("/create_session"))[0][1]
        fresh_headers = {"X-Session-ID": fresh}
        refused(http.post("/create", headers=fresh_headers, json={"split": "train", "index": 1, "task_spec": {}}),
                400, "input_validation")
        refused(http.post("/create", headers=fresh_headers, json={}), 400, "input_validation")
        refused(http.post("/create", headers=fresh_headers, json={"split": "train", "index": 99}), 404, "not_found")
        refused(http.post("/create", headers=fresh_headers, json={"env_name": "wordle", "split": "train", "index": 0}),
                404, "not_found")
        refused(http.post("/create", headers=fresh_headers, json={"toolset_name": "codex", "split": "train",
                                                                  "index": 0}), 400, "input_validation")
        assert "no such topic" in refused(http.post("/create", headers=fresh_headers,
                                                    json={"task_spec": {"topic": "explode"}}), 400, "input_validation")
        refused(http.post("/create", headers=headers, json={"split": "train", "index": 0}), 409, "input_validation")
        assert http.get("/health").json()["active_sessions"] == 1   # refused creations hold no slot
        wrong = call(http, sid, "write", input={"txt": "x"})
        assert wrong["reason"] == "input_validation" and wrong["error"].startswith("Tool input validation error")
        assert call(http, sid, "write", input="x")["reason"] == "bad_input_shape"
        refused(http.post("/call", headers=headers, json={"input": {}}), 400, "bad_input_shape")
        broke = call(http, sid, "wreck", input={})
        assert broke["reason"] == "execution_error" and "the tool broke" in broke["error"]
        refused(http.post("/call", headers=headers, json={"task_id": "never-issued"}), 404, "not_found")
        # After all that, the session still plays, and so does a WebSocket session beside it.
        assert call(http, sid, "write", input={"text": "ok"})["output"]["reward"] == 2.0
        with EnvClient(url).sync() as env:
            env.reset(topic="ws")
            # A WebSocket session's id is no ORS session: ORS routes neither serve nor delete it.
            refused(http.get("/prompt", headers={"X-Session-ID": env.session_id}), 404, "not_found")
            http.post("/delete", headers={"X-Session-ID": env.session_id})
            assert env.call("write", text="hi").reward == 2.0
        assert settled_sessions(http) == 1


def test_slow_call_pings_long_result_chunks_and_a_repeated_task_id_replays(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ors, "PING_INTERVAL_S", 0.2)
    monkeypatch.setattr(ors, "CHUNK_CHARS", 100)
    with httpx.Client(base_url=url, timeout=10) as http:
        sid = open_session(http)
        headers = {"X-Session-ID": sid}
        waited = sse(http.post("/call", headers=headers, json={"name": "wait", "input": {"seconds": 0.7}}))
        assert [e for e in waited if e[0] == "comment"].count(("comment", "ping")) >= 2
        assert result(waited)["output"]["blocks"][0]["text"] == "waited 0.7"
        shouted = sse(http.post("/call", headers=headers, json={"name": "shout", "input": {"times": 40}}))
        kinds = [kind for kind, _ in shouted]
        assert kinds[0] == "task_id" and kinds.count("chunk") >= 5 and kinds[-1] == "end"
        assert result(shouted)["output"]["blocks"][0]["text"] == "".join(f"word {i} and more " for i in range(40))
        before = len(NotesEnvironment.written)
        first = sse(http.post("/call", headers=headers, json={"name": "write", "input": {"text": "once"}}))
        task_id = first[0][1]
        again = sse(http.post("/call", headers=headers, json={"name": "write", "input": {"text": "once"},
                                                              "task_id": task_id}))
        assert again == first and len(NotesEnvironment.written) == before + 1   # replayed, not run again


def test_a_deleted_session_leaves_nothing_behind(url: str) -> None:
    """Its environment (and its calls' results) can be freed once the session is gone."""
    import gc

    with httpx.Client(base_url=url) as http:
        sids = [open_session(http) for _ in range(3)]
        for sid in sids:
            for text in ("a", "b"):
                call(http, sid, "write", input={"text": text})
            http.post("/delete", headers={"X-Session-ID": sid})
        for _ in range(20):
            gc.collect()
            if not NotesEnvironment.live:
                break
            time.sleep(0.05)
    assert not NotesEnvironment.live


def test_ors_sessions_share_the_pool_with_ws_and_capacity_answers_503() -> None:
    with running_server(notes_app(max_concurrent_envs=1, capacity_wait_s=0)) as url, \
            httpx.Client(base_url=url) as http:
        sid = open_session(http)
        second = sse(http.post("/create_session"))[0][1]
        reply = http.post("/create", headers={"X-Session-ID": second}, json={"split": "train", "index": 0})
        assert "capacity" in refused(reply, 503, "capacity") and reply.headers["retry-after"] == "1"
        with pytest.raises(CapacityError):
            EnvClient(url).sync().reset()
        assert call(http, sid, "write", input={"text": "still"})["ok"] is True
        http.post("/delete", headers={"X-Session-ID": sid})
        assert http.post("/create", headers={"X-Session-ID": second},
                         json={"split": "train", "index": 0}).status_code == 200


def test_idle_ors_session_is_reaped_unless_pinged_and_then_answers_410() -> None:
    with running_server(notes_app(max_concurrent_envs=4, session_timeout_s=0.6)) as url, \
            httpx.Client(base_url=url) as http:
        idle, pinged = open_session(http), open_session(http)
        deadline = time.monotonic() + 10
        while http.get("/health").json()["active_sessions"] > 1 and time.monotonic() < deadline:
            http.post("/ping", headers={"X-Session-ID": pinged})
            time.sleep(0.1)
        message = refused(http.post("/call", headers={"X-Session-ID": idle}, json={"name": "write", "input": {}}),
                          410, "session_ended")
        assert "idle timeout" in message
        assert call(http, pinged, "write", input={"text": "alive"})["ok"] is True


def test_shutdown_ends_ors_sessions() -> None:
    app = notes_app(max_concurrent_envs=2)
    with running_server(app) as url, httpx.Client(base_url=url) as http:
        sid = open_session(http)
    pool = app.state.envkit_pool
    assert pool.active == 0 and pool.ended(sid) == (1001, "server shutting down")


def test_secrets_are_never_logged(url: str, caplog: pytest.LogCaptureFixture) -> None:
    marker = "sk-secret-marker-123"
    with caplog.at_level(logging.DEBUG), httpx.Client(base_url=url) as http:
        sid = sse(http.post("/create_session"))[0][1]
        secrets = orjson.dumps({"api_key": {"value": marker, "domains": ["127.0.0.1"]}})
        import base64
        reply = http.post("/create", headers={"X-Session-ID": sid, "X-Secrets": base64.b64encode(secrets).decode()},
                          json={"task_spec": {"topic": "explode"}})
        assert reply.status_code == 400
    assert marker not in caplog.text and base64.b64encode(secrets).decode() not in caplog.text


def test_validate_checks_the_ors_routes_and_warns_where_tasks_are_missing() -> None:
    import asyncio

    from envkit.publish.validate import validate_url

    class Untasked(NotesEnvironment):
        TASKS = {}

    with running_server(notes_app(max_concurrent_envs=4)) as url:
        report = asyncio.run(validate_url(url))
    statuses = {check.name: check.status for check in report.checks}
    assert report.ok and all(statuses[name] == "ok" for name in ("ors catalogue", "ors tools", "ors session",
                                                                  "ors delete", "ors refusals"))
    untasked = create_app(Untasked, NoteAction, NoteObservation, env_name="untasked", max_concurrent_envs=4)
    with running_server(untasked) as url:
        report = asyncio.run(validate_url(url))
    checks = {check.name: check for check in report.checks}
    assert report.ok and checks["ors catalogue"].status == "warn" and "TASKS" in checks["ors catalogue"].detail
    assert checks["ors session"].status == "ok" and "empty task spec" in checks["ors session"].detail


class InlineNotes(NotesEnvironment):
    """The notes, run on the event loop: a call finishes before its answer starts."""

    RUN_INLINE = True


def test_a_quick_call_answers_in_one_body_and_oversized_or_misdirected_requests_are_refused() -> None:
    """A call that has finished before its answer starts (an inline tool) comes back as one plain event-stream body;
    a body over the server's message limit (declared or sent in chunks) is 413, a wrong method 405 with Allow; the
    session plays on."""
    app = create_app(InlineNotes, NoteAction, NoteObservation, env_name="notes", max_message_bytes=4096)
    with running_server(app) as served, httpx.Client(base_url=served) as http:
        sid = open_session(http)
        headers = {"X-Session-ID": sid}
        quick = http.post("/call", headers=headers, json={"name": "write", "input": {"text": "quick"}})
        assert quick.headers["content-length"] == str(len(quick.content))
        assert "transfer-encoding" not in quick.headers
        assert result(sse(quick))["output"]["reward"] == 5.0
        too_big = {"name": "write", "input": {"text": "x" * 5000}}
        assert "4096" in refused(http.post("/call", headers=headers, json=too_big), 413, "input_validation")
        chunks = iter([b'{"name": "write", "input": {"text": "', b"y" * 5000, b'"}}'])
        assert "smaller" in refused(http.post("/call", headers=headers, content=chunks), 413, "input_validation")
        wrong = http.get("/call", headers=headers)
        assert "answers POST only" in refused(wrong, 405, "method_not_allowed") and wrong.headers["allow"] == "POST"
        assert refused(http.delete("/notes/splits"), 405, "method_not_allowed")
        assert "y" * 5000 not in NotesEnvironment.written
        assert call(http, sid, "write", input={"text": "still here"})["output"]["reward"] == 10.0
