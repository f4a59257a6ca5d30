"""``ToolRegistry``: tool specs and their handlers, the loop's only source of tools."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import jsonschema_rs

from cleveragents.tool.errors import ToolRuntimeError
from cleveragents.tool.execution.schema import describe_function
from cleveragents.tool.spec import ToolSpec

__all__ = ["RegisteredTool", "ToolHandler", "ToolRegistry", "UnknownToolError"]

#: A handler takes the inputs (a dict, or keyword arguments for decorated functions) and
#: returns anything JSON-serialisable, directly or as an awaitable.
ToolHandler = Callable[..., Any]
F = TypeVar("F", bound=Callable[..., Any])
#: How many known names an unknown-tool message lists (a sidecar may serve hundreds).
_LISTED_TOOLS = 20


class UnknownToolError(ToolRuntimeError, LookupError):
    """A tool name that is not in the registry was asked for."""


@dataclass(frozen=True, slots=True)
class RegisteredTool:
    """A spec with its handler and what is needed to call it, prepared once at registration.

    ``keyword_names`` is ``None`` for handlers that take the inputs dict; for decorated
    functions it is the set of parameters they accept (``"*"`` among them when they take
    ``**kwargs``), so context keys reach only functions that ask for them.
    ``max_argument_values`` bounds how many JSON values (objects, arrays and scalars) the
    arguments of one call may hold before validation (``None``: no bound): validating costs
    the schema's expansion for each value, so a costly schema gets a tighter bound.
    """

    spec: ToolSpec
    handler: ToolHandler
    is_async: bool
    validator: Any
    keyword_names: frozenset[str] | None = None
    enum_params: Mapping[str, type[enum.Enum]] = field(default_factory=dict)
    max_argument_values: int | None = None


class ToolRegistry:
    """Holds tools by name. Register with :meth:`register` or the :meth:`tool` decorator."""

    __slots__ = ("_tools",)

    def __init__(self) -> None:
        self._tools: dict[str, RegisteredTool] = {}

    def register(
        self, spec: ToolSpec, handler: ToolHandler, *, max_argument_values: int | None = None
    ) -> ToolSpec:
        """Add a tool whose handler takes the inputs dict. A duplicate name is a ``ValueError``.

        With ``max_argument_values``, a call whose arguments hold more JSON values than that
        fails (``invalid_arguments``) without being validated.
        """
        entry = _prepare(spec, handler, keyword_names=None)
        if max_argument_values is not None:
            entry = dataclasses.replace(entry, max_argument_values=max_argument_values)
        self._add(entry)
        return spec

    @overload
    def tool(self, fn: F, /) -> F: ...

    @overload
    def tool(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_s: float | None = None,
        side_effects: bool = False,
        idempotent: bool = False,
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        fn: F | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_s: float | None = None,
        side_effects: bool = False,
        idempotent: bool = False,
    ) -> F | Callable[[F], F]:
        """Register a function as a tool, deriving its spec from its signature and docstring.

        Use bare (``@registry.tool``) or with overrides (``@registry.tool(name="x")``). The
        function receives the inputs as keyword arguments and is returned unchanged.
        """

        def decorate(func: F) -> F:
            summary, schema = describe_function(func)
            spec = ToolSpec(
                name=name or func.__name__,
                description=description if description is not None else summary,
                input_schema=schema,
                timeout_s=timeout_s,
                side_effects=side_effects,
                idempotent=idempotent,
            )
            entry = _prepare(spec, func, keyword_names=_keyword_names(func))
            self._add(dataclasses.replace(entry, enum_params=_enum_params(func)))
            return func

        return decorate(fn) if fn is not None else decorate

    def get(self, name: str) -> RegisteredTool | None:
        """The registered tool called ``name``, or ``None``."""
        return self._tools.get(name)

    def specs(self) -> list[ToolSpec]:
        """Every tool's spec, in registration order."""
        return [entry.spec for entry in self._tools.values()]

    def names(self) -> list[str]:
        """Every tool's name, in registration order."""
        return list(self._tools)

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """A new registry with only the named tools; unknown names raise ``UnknownToolError``."""
        wanted = list(dict.fromkeys(names))
        missing = [n for n in wanted if n not in self._tools]
        if missing:
            raise UnknownToolError(f"unknown tool(s): {', '.join(missing)}{self._known(missing)}")
        return self._with(self._tools[n] for n in wanted)

    def _known(self, missing: Sequence[str]) -> str:
        """What to say after unknown names: the closest known name, and the known ones."""
        import difflib  # only when a name is wrong (2M instructions an import less)

        known = sorted(self._tools)
        close = difflib.get_close_matches(missing[0], known, n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listed = ", ".join(known[:_LISTED_TOOLS]) or "none"
        if len(known) > _LISTED_TOOLS:
            listed += f" and {len(known) - _LISTED_TOOLS} more"
        return f"{hint}; known: {listed}"

    def include(self, other: ToolRegistry) -> None:
        """Add every tool of ``other``; a name already here is a ``ValueError``."""
        for entry in other._tools.values():
            self._add(entry)

    def remove(self, name: str) -> None:
        """Remove the tool called ``name`` (nothing if there is none); registries made from
        this one by ``subset`` or ``copy`` keep it."""
        self._tools.pop(name, None)

    def copy(self) -> ToolRegistry:
        """A new registry with the same tools, to which more can be added."""
        return self._with(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[ToolSpec]:
        return (entry.spec for entry in self._tools.values())

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names()!r})"

    def _add(self, entry: RegisteredTool) -> None:
        if entry.spec.name in self._tools:
            raise ValueError(f"a tool named {entry.spec.name!r} is already registered")
        self._tools[entry.spec.name] = entry

    def _with(self, entries: Iterable[RegisteredTool]) -> ToolRegistry:
        clone = ToolRegistry()
        clone._tools = {entry.spec.name: entry for entry in entries}
        return clone


def _prepare(
    spec: ToolSpec, handler: ToolHandler, *, keyword_names: frozenset[str] | None
) -> RegisteredTool:
    if not isinstance(spec, ToolSpec):
        raise TypeError(f"expected a ToolSpec, got {type(spec).__name__}")
    if not callable(handler):
        raise TypeError(f"the handler of tool {spec.name!r} is not callable")
    refused: list[str] = []

    def never_fetch(uri: str) -> Any:
        refused.append(uri)
        raise ValueError(f"{uri} is not fetched")

    try:
        validator = jsonschema_rs.validator_for(_plain(spec.input_schema), retriever=never_fetch)
    except (jsonschema_rs.ValidationError, ValueError) as exc:
        if refused:  # a schema is never fetched from elsewhere: not by a client, not the sidecar
            raise ValueError(
                f"tool {spec.name!r} has an input_schema with a $ref to {refused[0]!r}, outside "
                "the schema; only references inside it ('#/$defs/...', '#anchor') are allowed, "
                "and nothing is fetched"
            ) from None
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"tool {spec.name!r} has an invalid input_schema: {first_line}") from exc
    return RegisteredTool(spec, handler, _is_async(handler), validator, keyword_names)


def _plain(value: Any) -> Any:
    """Turn mappings into dicts, as the validator only accepts built-in containers."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _is_async(handler: ToolHandler) -> bool:
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - an object with an async __call__
    )


def _keyword_names(fn: Callable[..., Any]) -> frozenset[str]:
    names = set()
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind is param.VAR_KEYWORD:
            names.add("*")
        elif param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            names.add(name)
    return frozenset(names)


def _enum_params(fn: Callable[..., Any]) -> dict[str, type[enum.Enum]]:
    """Parameters typed with an Enum (or an optional one): their JSON value becomes a member."""
    found: dict[str, type[enum.Enum]] = {}
    for name, hint in typing.get_type_hints(fn).items():
        is_union = typing.get_origin(hint) in (typing.Union, _UnionType)
        options = typing.get_args(hint) if is_union else (hint,)
        enums = [o for o in options if inspect.isclass(o) and issubclass(o, enum.Enum)]
        if len(enums) == 1 and name != "return":
            found[name] = enums[0]
    return found


_UnionType = type(int | None)
