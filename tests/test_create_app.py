"""create_app and tool definitions: start-up errors name the class, the method and the fix."""

from __future__ import annotations

import re
from typing import Literal

import pytest
from sample_envs import (
    BrokenFactoryEnvironment,
    CounterAction,
    CounterEnvironment,
    CounterObservation,
    SingleSessionEnvironment,
)

from envkit import ConfigurationError, EnvClient, EnvError, Environment, ToolDefinitionError, create_app, tool
from envkit.app.settings import ServerSettings
from envkit.testing import running_server
from envkit.tools import parse_google_docstring, tool_specs


def test_concurrency_above_one_needs_the_declaration_and_builds_nothing() -> None:
    built = SingleSessionEnvironment.instances
    with pytest.raises(ConfigurationError, match="SUPPORTS_CONCURRENT_SESSIONS"):
        create_app(SingleSessionEnvironment, CounterAction, CounterObservation, max_concurrent_envs=2)
    assert SingleSessionEnvironment.instances == built
    create_app(SingleSessionEnvironment, CounterAction, CounterObservation, max_concurrent_envs=1)


@pytest.mark.parametrize("settings, message", [
    ({"max_concurrent_envs": 0}, "max_concurrent_envs must be at least 1, got 0"),
    ({"max_concurrent_envs": "4"}, "max_concurrent_envs must be an integer, got '4'"),
    ({"session_timeout_s": 0}, "session_timeout_s must be positive or None, got 0"),
    ({"capacity_wait_s": -1}, "capacity_wait_s must be at least 0, got -1"),
    ({"ping_interval_s": 0}, "ping_interval_s must be positive or None, got 0"),
    ({"ping_timeout_s": 0}, "ping_timeout_s must be positive, got 0"),
    ({"max_workers": 0}, "max_workers must be at least 1 or None, got 0"),
    ({"max_message_bytes": True}, "max_message_bytes must be an integer, got True"),
    ({"max_sessions_per_client": 0}, "max_sessions_per_client must be at least 1 or None, got 0"),
    ({"allowed_origins": "https://a.example"}, "allowed_origins must be a list of strings, got 'https://a.example'"),
    ({"max_sessions": 4}, "unknown server setting max_sessions; the settings are max_concurrent_envs, "),
])
def test_bad_settings(settings: dict, message: str) -> None:
    """Each bad setting is one line naming it, whether it comes as a keyword or in a `ServerSettings`."""
    with pytest.raises(ConfigurationError, match=re.escape(message)) as raised:
        create_app(CounterEnvironment, CounterAction, CounterObservation, **settings)
    assert "\n" not in str(raised.value)
    if "unknown" not in message:
        with pytest.raises(ConfigurationError, match=re.escape(message)):
            ServerSettings(**settings)


def test_settings_come_from_the_caller_then_the_environment_then_the_defaults() -> None:
    environ = {"MAX_CONCURRENT_ENVS": "8", "SESSION_TIMEOUT_S": "30", "ENVKIT_API_KEY": " key ",
               "FORWARDED_ALLOW_IPS": "10.0.0.1, 10.0.0.2"}
    settings = ServerSettings.from_environment(environ, session_timeout_s=5.0)
    assert (settings.max_concurrent_envs, settings.session_timeout_s, settings.api_keys,
            settings.forwarded_allow_ips) == (8, 5.0, ("key",), ("10.0.0.1", "10.0.0.2"))
    assert ServerSettings.from_environment({}, concurrent=True) == ServerSettings(max_concurrent_envs=64)
    assert ServerSettings.from_environment({"SPACE_ID": "me/env"}).forwarded_allow_ips == ("private",)
    assert ServerSettings.from_environment({"MY_KEY": "k"}, api_key_variable="MY_KEY").api_keys == ("k",)
    with pytest.raises(ConfigurationError, match="environment variable MAX_CONCURRENT_ENVS='lots' is not a number"):
        ServerSettings.from_environment({"MAX_CONCURRENT_ENVS": "lots"})
    with pytest.raises(ConfigurationError, match="environment variable MY_KEY is not set or empty"):
        ServerSettings.from_environment({}, api_key_variable="MY_KEY")


def test_an_app_takes_a_settings_object_and_changes_to_it() -> None:
    settings = ServerSettings(max_concurrent_envs=3, session_timeout_s=None)
    app = create_app(CounterEnvironment, CounterAction, CounterObservation, settings=settings, capacity_wait_s=0)
    pool = app.state.envkit_pool
    assert app.settings == ServerSettings(max_concurrent_envs=3, session_timeout_s=None, capacity_wait_s=0)
    assert (pool.max_sessions, pool.idle_timeout_s) == (3, None)


def test_models_must_be_envkit_models() -> None:
    with pytest.raises(ConfigurationError, match="action_cls"):
        create_app(CounterEnvironment, dict, CounterObservation)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="not an envkit Environment"):
        create_app(dict, CounterAction, CounterObservation)  # type: ignore[arg-type]


def test_factory_needs_a_known_class() -> None:
    def annotated() -> CounterEnvironment:
        return CounterEnvironment()

    create_app(annotated, CounterAction, CounterObservation, max_concurrent_envs=2)
    with pytest.raises(ConfigurationError, match="env_class"):
        create_app(lambda: CounterEnvironment(), CounterAction, CounterObservation)
    create_app(lambda: CounterEnvironment(), CounterAction, CounterObservation, env_class=CounterEnvironment)


def test_factory_failure_is_reported_at_connect_and_server_carries_on() -> None:
    app = create_app(BrokenFactoryEnvironment, CounterAction, CounterObservation, max_concurrent_envs=2)
    with running_server(app) as url:
        for _ in range(3):   # repeated failures leak no capacity
            with pytest.raises(EnvError) as error:
                EnvClient(url).sync().connect()
            assert error.value.code == "FACTORY_ERROR" and "simulator binary is missing" in error.value.message
        assert EnvClient(url).sync().health() == {"status": "healthy", "active_sessions": 0, "max_sessions": 2}


class _Base(Environment):
    def reset(self, seed=None, episode_id=None, **kwargs): ...
    def step(self, action): ...
    @property
    def state(self): ...


def _env_with(method) -> type:
    return type("ToolEnv", (_Base,), {method.__name__: tool(method)})


def test_tool_without_docstring() -> None:
    def jump(self, height: int) -> str:
        return ""
    with pytest.raises(ToolDefinitionError, match=r"ToolEnv\.jump: tool has no docstring"):
        tool_specs(_env_with(jump))


def test_tool_argument_without_description() -> None:
    def jump(self, height: int, style: str) -> str:
        """Jump.

        Args:
            height: How high.
        """
    with pytest.raises(ToolDefinitionError, match="argument `style` is not described"):
        tool_specs(_env_with(jump))


def test_tool_argument_without_type_hint() -> None:
    def jump(self, height) -> str:
        """Jump.

        Args:
            height: How high.
        """
    with pytest.raises(ToolDefinitionError, match="argument `height` has no type hint"):
        tool_specs(_env_with(jump))


def test_tool_with_var_kwargs_or_unschematic_type() -> None:
    def jump(self, **options: int) -> str:
        """Jump.

        Args:
            options: Options.
        """
    with pytest.raises(ToolDefinitionError, match=r"\*\*kwargs"):
        tool_specs(_env_with(jump))

    def fly(self, where: object) -> str:
        """Fly.

        Args:
            where: Where to.
        """
    with pytest.raises(ToolDefinitionError, match="has no JSON schema"):
        tool_specs(_env_with(fly))


def test_create_app_checks_tools_at_start_up() -> None:
    def jump(self, height: int) -> str:
        return ""
    env_class = _env_with(jump)
    with pytest.raises(ToolDefinitionError):
        create_app(env_class, CounterAction, CounterObservation)


def test_tool_schema_shape_and_validation() -> None:
    def move(self, direction: Literal["left", "right"], steps: int = 1, note: str | None = None) -> str:
        """Move the paddle.

        Several lines of
        explanation.

        Args:
            direction: Which way to move.
            steps: How many columns,
                at most four.
            note: Anything to remember.

        Returns:
            The board after the move.
        """
    spec = tool_specs(_env_with(move))["move"]
    assert spec.schema() == {"type": "function", "function": {
        "name": "move",
        "description": "Move the paddle.\n\nSeveral lines of\nexplanation.",
        "parameters": {"type": "object", "properties": {
            "direction": {"type": "string", "enum": ["left", "right"], "description": "Which way to move."},
            "steps": {"type": "integer", "description": "How many columns, at most four."},
            "note": {"type": "string", "nullable": True, "description": "Anything to remember."},
        }, "required": ["direction"]},
        "return": {"type": "string", "description": "The board after the move."},
    }}
    assert spec.validate_arguments({"direction": "left"}) == {"direction": "left", "steps": 1, "note": None}
    with pytest.raises(Exception, match="direction"):
        spec.validate_arguments({"direction": "up"})
    with pytest.raises(Exception, match="Extra inputs"):
        spec.validate_arguments({"direction": "left", "speed": 3})


def test_tool_schema_equals_transformers_get_json_schema() -> None:
    transformers_utils = pytest.importorskip("transformers.utils", reason="the train extra provides transformers")

    def act(self, word: str, count: int, scale: float = 1.0, tags: list[str] | None = None,
            mode: Literal["a", "b"] = "a", flag: bool = False) -> str:
        """Do an action,
        described over two lines.

        And a second paragraph.

        Args:
            word: A word,
                described at length.
            count: A count.
            scale: A scale.
            tags: Some tags.
            mode: A mode.
            flag: A flag.
        """
    ours = tool_specs(_env_with(act))["act"].schema()
    assert ours == transformers_utils.get_json_schema(act)


def test_google_docstring_parsing_keeps_typed_arguments() -> None:
    parsed = parse_google_docstring("""Summary line.

    Args:
        name (str): The name.
        *rest: Ignored here.
    Returns:
        str: text
    """)
    assert parsed.description == "Summary line."
    assert parsed.args == {"name": "The name.", "rest": "Ignored here."}
    assert parsed.returns == "str: text"
