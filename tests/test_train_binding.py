"""The class `envkit train` hands to TRL, generated from a served tool listing; real servers on 127.0.0.1.

The schemas are compared with what `transformers.utils.get_json_schema` (TRL's own schema builder)
makes of a hand-written wrapper, the way TRL's guide writes one.
"""

from __future__ import annotations

import inspect
import threading
import time
import typing
from collections.abc import Iterator
from typing import Any, Literal, Optional

import httpx
import pytest
from pydantic import Field
from sample_envs import CounterAction, CounterEnvironment, CounterObservation
from transformers.utils import get_json_schema

from envkit import (
    Action,
    EnvClient,
    Environment,
    Observation,
    State,
    create_app,
    tool,
    tool_specs,
)
from envkit.errors import EnvConnectionError
from envkit.app.targets import bundled_envs, resolve_target
from envkit.testing import ServedProcess, free_port, running_server
from envkit.train import BindingError, Tally, bind, environment_factory
from envkit.play.schema import check_tool_schema, docstring, type_hint


class BoardAction(Action):
    cells: list[int] = Field(default_factory=list)


class BoardObservation(Observation):
    board: str = ""
    reward_components: dict[str, float] = Field(default_factory=dict)

    def as_text(self) -> str:
        return self.board


class BoardEnvironment(Environment[BoardAction, BoardObservation, State]):
    """A board whose tools use every argument type a model can fill in."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUN_INLINE = True

    def __init__(self) -> None:
        self.cells: list[str] = ["."] * 9
        self.calls: list[dict[str, Any]] = []

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> BoardObservation:
        self.cells = ["."] * 9
        return BoardObservation(board="".join(self.cells), reward_components={"filled": 0.0}, reward=0.0)

    def step(self, action: BoardAction) -> BoardObservation:
        return self.place("x", action.cells)

    @property
    def state(self) -> State:
        return State()

    @tool
    def place(self, piece: Literal["x", "o"], cells: list[int], note: Optional[str] = None,
              strict: bool = False) -> BoardObservation:
        """Put a piece on some cells.

        Args:
            piece: Which piece to put down.
            cells: The cells to fill, 0 to 8.
            note: A remark to keep with the move.
            strict: Refuse cells that are taken.

        Returns:
            The board after the move.
        """
        for cell in cells:
            if strict and self.cells[cell] != ".":
                raise ValueError(f"cell {cell} is taken")
            self.cells[cell] = piece
        filled = sum(cell != "." for cell in self.cells)
        return BoardObservation(board="".join(self.cells) + (f" ({note})" if note else ""), reward=float(len(cells)),
                                done=filled == 9, reward_components={"filled": filled / 9})

    @tool
    def weigh(self, weights: dict[str, float], scale: int | float = 1) -> str:
        """Weigh named things.

        Args:
            weights: Weight of each thing, by name.
            scale: Multiply every weight by this.
        """
        return str(sum(weights.values()) * scale)


@pytest.fixture
def board_url() -> Iterator[str]:
    with running_server(create_app(BoardEnvironment, BoardAction, BoardObservation, max_concurrent_envs=8)) as url:
        yield url


def returns_unwrapped(schema: dict[str, Any]) -> dict[str, Any]:
    """transformers keeps a wrapped `Returns:` text with its raw indentation; the listing has it on one line."""
    returns = schema["function"].get("return", {})
    if "description" in returns:
        returns["description"] = " ".join(returns["description"].split())
    return schema


def hand_written(method: Any) -> Any:
    """What a TRL user writes by hand for an environment tool: same signature and docstring, returns str."""
    signature = inspect.signature(method)
    hints = typing.get_type_hints(method)

    def wrapper(self: Any, **kwargs: Any) -> str:
        return ""

    wrapper.__name__ = method.__name__
    wrapper.__doc__ = method.__doc__
    wrapper.__signature__ = signature.replace(return_annotation=str)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**{name: hints[name] for name in signature.parameters if name in hints}, "return": str}
    return wrapper


class EchoWrapper:
    """The echo wrapper as TRL's guide writes it."""

    def echo(self, message: str) -> str:
        """Echo a message back; longer messages earn more reward.

        Args:
            message: The message to echo.
        """
        return message


def active_sessions(url: str, expected: int) -> int:
    """The server's open sessions, once they settle at `expected` (closing is asynchronous); bounded wait."""
    for _ in range(100):
        active = EnvClient(url).sync().health()["active_sessions"]
        if active == expected:
            break
        time.sleep(0.05)
    return active


def tools_of(cls: type) -> list[str]:
    return sorted(name for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
                  if not name.startswith("_") and name != "reset")


def test_echo_schema_equals_a_hand_written_wrapper(echo_url: str) -> None:
    cls = environment_factory(echo_url)
    assert get_json_schema(cls().echo) == get_json_schema(EchoWrapper().echo)
    listed = EnvClient(echo_url).sync().tools()[0]["function"]
    built = get_json_schema(cls().echo)["function"]
    assert (built["name"], built["description"], built["parameters"]) == (
        listed["name"], listed["description"], listed["parameters"])


@pytest.mark.parametrize("name", sorted(bundled_envs()))
def test_bundled_env_schemas_equal_hand_written_wrappers(name: str) -> None:
    target = resolve_target(name)
    with running_server(create_app(target.env_class, target.action_cls, target.observation_cls,
                                   max_concurrent_envs=4)) as url:
        cls = environment_factory(url)
        environment = cls()
        tools = list(tool_specs(target.env_class))
        assert tools_of(cls) == sorted(tools)
        for tool_name in tools:
            expected = get_json_schema(hand_written(getattr(target.env_class, tool_name)))
            assert returns_unwrapped(get_json_schema(getattr(environment, tool_name))) == returns_unwrapped(expected)


def test_rich_argument_types_round_trip_and_reach_the_environment(board_url: str) -> None:
    cls = environment_factory(board_url)
    environment = cls()
    for tool_name in ("place", "weigh"):
        expected = get_json_schema(hand_written(getattr(BoardEnvironment, tool_name)))
        assert get_json_schema(getattr(environment, tool_name)) == expected
    hints = typing.get_type_hints(cls.place)
    assert hints["piece"] == Literal["x", "o"] and hints["cells"] == list[int] and hints["note"] == Optional[str]
    assert str(inspect.signature(cls.weigh)) == \
        "(self, weights: dict[str, float], scale: Union[int, float] = <default>) -> str"
    environment.reset()
    assert environment.place("o", [0, 1], note="opening") == "oo....... (opening)"
    assert environment.place(piece="x", cells=[2]) == "oox......"
    assert environment.weigh({"a": 1.5, "b": 2.0}, scale=2) == "7.0"
    assert environment.weigh({"a": 1.5}) == "1.5"  # the server's default scale
    assert environment.episode.reward == 3.0 and environment.episode.components == {"filled": 3 / 9}
    with pytest.raises(TypeError, match="missing a required argument: 'cells'"):
        environment.place("x")
    with pytest.raises(ValueError, match="cell 0 is taken"):
        environment.place("x", [0], strict=True)
    assert environment.episode.tool_errors == 1
    cls._close_all()


def test_only_tools_and_reset_are_public(board_url: str) -> None:
    cls = environment_factory(board_url)
    public = [name for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction) if not name.startswith("_")]
    assert sorted(public) == ["place", "reset", "weigh"]
    assert cls.component_names == ("filled",)


def test_reset_tools_and_game_over_over_a_real_server(counter_url: str) -> None:
    tally = Tally()
    cls = bind(counter_url, tally=tally)
    environment = cls()
    with pytest.raises(ValueError, match="reset"):
        environment.add(1)
    prompt = [{"role": "user", "content": "Count to 100."}]
    first = environment.reset(prompt=prompt, tag="mine", seed=3)
    assert first == '\n\n{"total": 0, "tag": "mine"}'
    assert environment.episode.row == {"tag": "mine", "seed": 3}
    assert environment.add(amount=60) == '{"total": 60, "tag": "mine"}'
    assert environment.peek() == "total is 60"
    assert environment.add(40) == '{"total": 100, "tag": "mine"}'
    assert environment.episode.done and environment.episode.reward == 100.0
    with pytest.raises(ValueError, match="^Game over.$"):
        environment.add(1)
    assert active_sessions(counter_url, 0) == 0  # closed as soon as the game ended
    environment.reset(tag="again")
    assert environment.episode.reward == 0.0 and environment.episode.done is False
    other = cls()
    other.reset()
    assert active_sessions(counter_url, 2) == 2
    environment.reset()  # a new episode closes the previous session first
    assert active_sessions(counter_url, 2) == 2
    cls._close_all()
    assert active_sessions(counter_url, 0) == 0
    assert (tally.episodes, tally.finished, tally.tool_calls, tally.lost) == (4, 1, 3, 0)


def test_server_errors_become_tool_errors_and_the_episode_goes_on(counter_url: str) -> None:
    cls = bind(counter_url)
    environment = cls()
    environment.reset()
    with pytest.raises(ValueError, match="amount"):
        environment.add(amount="many")
    assert environment.add(2) == '{"total": 2, "tag": ""}'
    assert cls.tally.error_codes == {"VALIDATION_ERROR": 1}
    cls._close_all()


def test_a_session_lost_mid_episode_ends_it_and_is_never_continued() -> None:
    with ServedProcess("echo") as served:
        cls = bind(served.url, reconnect_timeout=0)
        environment = cls()
        environment.reset()
        assert environment.echo("hi") == "hi"
        served.kill()
        with pytest.raises(ValueError, match="Episode lost"):
            environment.echo("anyone there?")
        assert environment.episode.lost and cls.tally.lost == 1
        with pytest.raises(ValueError, match="Episode lost"):
            environment.echo("still?")
        assert cls.tally.tool_calls == 2  # the call after the loss never left the process
        with pytest.raises(EnvConnectionError):
            environment.reset()


def test_reset_waits_for_a_restarting_server() -> None:
    port = str(free_port())
    with ServedProcess("echo", "--port", port) as served:
        cls = bind(served.url, reconnect_timeout=30)
        environment = cls()
        environment.reset()
        served.kill()
        with pytest.raises(ValueError, match="Episode lost"):
            environment.echo("hello")
        restarted = ServedProcess("echo", "--port", port)
        threading.Timer(1.0, restarted.start).start()  # reset keeps trying while the server comes back
        try:
            assert environment.reset() == "Echo environment ready!"
            assert environment.echo("back") == "back"
            cls._close_all()
        finally:
            restarted.kill()


def test_tools_that_cannot_be_bound_fail_at_start_up() -> None:
    class Reserved(CounterEnvironment):
        @tool
        def get_reward(self) -> str:
            """Say the reward."""
            return "0"

    with running_server(create_app(Reserved, CounterAction, CounterObservation)) as url:
        with pytest.raises(BindingError, match="get_reward.*rename the tool"):
            bind(url)

    class Choices(CounterEnvironment):
        @tool
        def pick(self, flavour: str) -> str:
            """Pick a flavour.

            Args:
                flavour: The flavour (choices: ["tea", "coffee"])
            """
            return flavour

    with running_server(create_app(Choices, CounterAction, CounterObservation)) as url:
        with pytest.raises(BindingError, match=r"'flavour' ends in '\(choices: ...\)'"):
            bind(url)

    class Mixed(CounterEnvironment):
        @tool
        def send(self, payload: list[str] | int) -> str:
            """Send a payload.

            Args:
                payload: Words, or a code.
            """
            return str(payload)

    # transformers writes this union as {"type": ["array", "integer"]}, losing the item type the server validates
    with running_server(create_app(Mixed, CounterAction, CounterObservation)) as url:
        with pytest.raises(BindingError, match=r"tool 'send': the model would see parameters .*'array', 'integer'"):
            bind(url)


def test_a_server_without_tools_is_refused() -> None:
    app = create_app(_NoTools, CounterAction, CounterObservation)
    with running_server(app) as url:
        with pytest.raises(BindingError, match="lists no tools"):
            bind(url)


class _NoTools(Environment[CounterAction, CounterObservation, State]):
    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> CounterObservation:
        return CounterObservation()

    def step(self, action: CounterAction) -> CounterObservation:
        return CounterObservation()

    @property
    def state(self) -> State:
        return State()


def test_unreachable_server_is_a_clear_error() -> None:
    port = free_port()
    with pytest.raises(EnvConnectionError, match=f"cannot connect to http://127.0.0.1:{port}/metadata"):
        bind(f"http://127.0.0.1:{port}")


def test_several_servers_give_a_dict_by_name(echo_url: str, counter_url: str) -> None:
    classes = environment_factory([echo_url, counter_url])
    assert set(classes) == {"EchoEnvironment", "CounterEnvironment"}
    assert classes["EchoEnvironment"].tally is classes["CounterEnvironment"].tally
    named = environment_factory({"a": echo_url, "b": echo_url})
    assert named["a"].env_name == "a" and named["b"].url == echo_url
    with pytest.raises(BindingError, match="two servers serve 'EchoEnvironment'"):
        environment_factory([echo_url, echo_url])


@pytest.mark.parametrize("schema, hint", [
    ({"type": "string"}, str),
    ({"type": "integer", "enum": [1, 2]}, Literal[1, 2]),
    ({"type": "array", "items": {"type": "number"}}, list[float]),
    ({"type": "array"}, list[Any]),
    ({"type": "object", "additionalProperties": {"type": "boolean"}}, dict[str, bool]),
    ({"type": "string", "nullable": True}, Optional[str]),
    ({"type": ["integer", "string"]}, typing.Union[int, str]),
    ({"anyOf": [{}, {"type": "integer"}]}, typing.Union[Any, int]),
    ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}, tuple[str, int]),
    ({}, Any),
])
def test_json_schema_to_type_hint(schema: dict[str, Any], hint: Any) -> None:
    assert type_hint(schema, "t") == hint

    def function(value: Any) -> str:
        return ""

    function.__annotations__ = {"value": hint, "return": str}
    function.__doc__ = docstring("Do it.", {"value": "The value."}, None)
    listed = {"name": "function", "description": "Do it.",
              "parameters": {"type": "object", "properties": {"value": {**schema, "description": "The value."}},
                             "required": ["value"]}}
    check_tool_schema(function, listed)


def test_unsupported_json_schema_is_named() -> None:
    with pytest.raises(BindingError, match="argument 'x'.*no Python type"):
        type_hint({"type": "string-ish"}, "tool 'f', argument 'x'")


def test_the_class_is_named_after_the_env(echo_url: str) -> None:
    assert httpx.get(echo_url + "/metadata").json()["name"] == "EchoEnvironment"
    assert bind(echo_url).__name__ == "EchoEnv"
    assert bind(echo_url, name="my-echo 2").__name__ == "MyEcho2Env"
