"""ToolRegistry: registration, the decorator, look-ups and subsets."""

import http.server
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from cleveragents.tool import ToolRegistry, ToolSpec, UnknownToolError


def handler(inputs: Mapping[str, Any]) -> dict[str, Any]:
    return dict(inputs)


def test_registered_spec_is_visible_through_specs_contains_and_len() -> None:
    registry = ToolRegistry()
    spec = ToolSpec("read_file", "Read a file.", {"type": "object"})

    returned = registry.register(spec, handler)

    assert returned is spec
    assert registry.specs() == [spec]
    assert "read_file" in registry
    assert "write_file" not in registry
    assert len(registry) == 1


def test_empty_registry_has_no_specs() -> None:
    registry = ToolRegistry()

    assert registry.specs() == []
    assert len(registry) == 0
    assert "anything" not in registry


def test_specs_and_iteration_keep_registration_order() -> None:
    registry = ToolRegistry()
    for name in ("zeta", "alpha", "mid"):
        registry.register(ToolSpec(name), handler)

    assert [s.name for s in registry.specs()] == ["zeta", "alpha", "mid"]
    assert [s.name for s in registry] == ["zeta", "alpha", "mid"]
    assert registry.names() == ["zeta", "alpha", "mid"]


def test_registering_a_duplicate_name_raises_value_error() -> None:
    registry = ToolRegistry()
    registry.register(ToolSpec("dup"), handler)

    with pytest.raises(ValueError, match="'dup' is already registered"):
        registry.register(ToolSpec("dup", "another"), handler)
    assert len(registry) == 1


def test_decorating_a_duplicate_name_raises_value_error() -> None:
    registry = ToolRegistry()
    registry.register(ToolSpec("dup"), handler)

    with pytest.raises(ValueError, match="'dup' is already registered"):

        @registry.tool(name="dup")
        def other() -> None:
            pass


@pytest.mark.parametrize("name", ["", "has space", "dot.ted", "x" * 65, "ümlaut", "a/b"])
def test_invalid_tool_name_raises_value_error(name: str) -> None:
    with pytest.raises(ValueError, match="invalid tool name"):
        ToolSpec(name)


@pytest.mark.parametrize("name", ["a", "x" * 64, "read-file_V2", "0"])
def test_names_providers_accept_are_valid(name: str) -> None:
    assert ToolSpec(name).name == name


def test_decorator_with_an_invalid_name_raises_value_error() -> None:
    registry = ToolRegistry()

    with pytest.raises(ValueError, match="invalid tool name 'bad name'"):

        @registry.tool(name="bad name")
        def fine() -> None:
            pass

    assert len(registry) == 0


def test_input_schema_that_is_not_an_object_schema_raises_value_error() -> None:
    with pytest.raises(ValueError, match="input_schema must describe an object"):
        ToolSpec("t", input_schema={"type": "string"})


def test_a_misspelt_schema_type_is_named_in_the_error() -> None:
    with pytest.raises(ValueError, match="must describe an object") as raised:
        ToolSpec("t", input_schema={"type": "objekt"})

    assert str(raised.value) == (
        'tool \'t\': input_schema must describe an object ("type": "object"), not "type": "objekt"'
    )


@pytest.fixture
def schema_server() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server that would serve any schema; the paths it was asked for."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"type": "string"}')

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/name.json", asked
    server.shutdown()
    server.server_close()


def test_a_remote_ref_is_refused_at_registration_and_never_fetched(
    schema_server: tuple[str, list[str]],
) -> None:
    # What a client's own registry does with its tools before it sends them: nothing fetched.
    url, asked = schema_server
    schema = {"type": "object", "properties": {"name": {"$ref": url}}}

    with pytest.raises(ValueError, match="outside the schema") as raised:
        ToolRegistry().register(ToolSpec("t", input_schema=schema), handler)

    assert asked == []
    assert str(raised.value) == (
        f"tool 't' has an input_schema with a $ref to {url!r}, outside the schema; only "
        "references inside it ('#/$defs/...', '#anchor') are allowed, and nothing is fetched"
    )


def test_a_ref_inside_the_schema_is_resolved() -> None:
    schema = {
        "type": "object",
        "$defs": {"name": {"type": "string"}},
        "properties": {"name": {"$ref": "#/$defs/name"}},
    }
    registry = ToolRegistry()
    registry.register(ToolSpec("t", input_schema=schema), handler)

    assert "t" in registry


def test_invalid_json_schema_raises_value_error_at_registration() -> None:
    registry = ToolRegistry()
    spec = ToolSpec("t", input_schema={"type": "object", "properties": {"a": {"type": "bogus"}}})

    with pytest.raises(ValueError, match="tool 't' has an invalid input_schema"):
        registry.register(spec, handler)
    assert "t" not in registry


def test_non_positive_timeout_raises_value_error() -> None:
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        ToolSpec("t", timeout_s=0)


def test_non_callable_handler_raises_type_error() -> None:
    registry = ToolRegistry()

    with pytest.raises(TypeError, match="not callable"):
        registry.register(ToolSpec("t"), "not a function")  # type: ignore[arg-type]


def test_spec_defaults_are_empty_description_object_schema_and_no_timeout() -> None:
    spec = ToolSpec("t")

    assert spec.description == ""
    assert spec.input_schema == {"type": "object"}
    assert spec.timeout_s is None


def test_bare_decorator_registers_the_function_under_its_name_and_returns_it() -> None:
    registry = ToolRegistry()

    def greet(who: str) -> str:
        """Say hello."""
        return f"hello {who}"

    decorated = registry.tool(greet)

    assert decorated is greet
    assert "greet" in registry
    (spec,) = registry.specs()
    assert spec.name == "greet"
    assert spec.description == "Say hello."
    assert spec.timeout_s is None


def test_decorator_with_arguments_overrides_name_description_and_timeout() -> None:
    registry = ToolRegistry()

    @registry.tool(name="say_hi", description="Greets someone.", timeout_s=2.5)
    def greet(who: str) -> str:
        """Docstring summary that the override replaces."""
        return f"hello {who}"

    (spec,) = registry.specs()
    assert spec.name == "say_hi"
    assert spec.description == "Greets someone."
    assert spec.timeout_s == 2.5
    assert "greet" not in registry
    assert greet("x") == "hello x"


def test_decorator_keeps_an_explicitly_empty_description() -> None:
    registry = ToolRegistry()

    @registry.tool(description="")
    def quiet() -> None:
        """Not shown."""

    assert registry.specs()[0].description == ""


def test_get_returns_the_registered_tool_or_none() -> None:
    registry = ToolRegistry()
    spec = registry.register(ToolSpec("t"), handler)

    entry = registry.get("t")

    assert entry is not None
    assert entry.spec is spec
    assert entry.handler is handler
    assert registry.get("missing") is None


def test_subset_keeps_only_the_named_tools_in_the_requested_order() -> None:
    registry = ToolRegistry()
    for name in ("a", "b", "c"):
        registry.register(ToolSpec(name), handler)

    sub = registry.subset(["c", "a", "c"])

    assert [s.name for s in sub.specs()] == ["c", "a"]
    assert len(registry) == 3


def test_subset_with_unknown_names_raises_unknown_tool_error_naming_them() -> None:
    registry = ToolRegistry()
    registry.register(ToolSpec("a"), handler)

    with pytest.raises(UnknownToolError, match="unknown tool\\(s\\): nope, gone") as info:
        registry.subset(["a", "nope", "gone"])
    assert isinstance(info.value, LookupError)


def test_copy_is_independent_of_the_original() -> None:
    registry = ToolRegistry()
    registry.register(ToolSpec("a"), handler)

    clone = registry.copy()
    clone.register(ToolSpec("b"), handler)

    assert clone.names() == ["a", "b"]
    assert registry.names() == ["a"]
