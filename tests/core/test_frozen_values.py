"""``quick_init``: a frozen dataclass's values built through an unfrozen twin are the values the
dataclass builds: frozen, equal, hashed, shown, pickled and replaced alike."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any, Generic, TypeVar

import pytest

from cleveragents.tool import events, messages, records
from cleveragents.tool.execution.runner import CallScope
from cleveragents.tool.frozen import quick_init


def _kinds_of_fields(decorate: bool) -> type:
    """A class with every kind of field quick_init handles, quick or as the dataclass makes it."""

    @dataclasses.dataclass(frozen=True, slots=True)
    class Base:
        first: int
        second: str = "b"

    @dataclasses.dataclass(frozen=True, slots=True)
    class Kinds(Base):
        listed: list[int] = dataclasses.field(default_factory=list)
        hidden: str | None = dataclasses.field(default=None, init=False)
        made: dict[str, int] = dataclasses.field(default_factory=dict, init=False)
        named: float = dataclasses.field(default=1.5, kw_only=True)
        required: bool = dataclasses.field(kw_only=True)

        def __post_init__(self) -> None:
            object.__setattr__(self, "hidden", f"{self.first}{self.second}")

    return quick_init(Kinds) if decorate else Kinds


QUICK, PLAIN = _kinds_of_fields(True), _kinds_of_fields(False)


def _init_of(cls: type) -> Any:
    return cls.__dict__["__init__"]


def _new_of(cls: type) -> Any:
    return cls.__dict__["__new__"].__func__


def _values(value: Any) -> dict[str, Any]:
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((1,), {"required": True}),
        ((2, "x", [3]), {"named": 2.5, "required": False}),
        ((), {"first": 4, "second": "y", "listed": [], "required": True}),
    ],
)
def test_quick_init_sets_what_the_dataclass_init_sets(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    assert _values(QUICK(*args, **kwargs)) == _values(PLAIN(*args, **kwargs))


def test_quick_init_takes_the_dataclass_init_parameters() -> None:
    QUICK(1, required=True)  # the quick __new__ is made with the first value
    quick = inspect.signature(_new_of(QUICK), follow_wrapped=False).parameters
    plain = inspect.signature(_init_of(PLAIN)).parameters
    assert [(p.name, p.kind) for p in quick.values()][1:] == [
        (p.name, p.kind) for p in plain.values()
    ][1:]


def test_a_quick_class_shows_the_dataclass_signature() -> None:
    assert inspect.signature(QUICK) == inspect.signature(PLAIN)


def test_each_quick_value_gets_its_own_default_factory_value() -> None:
    assert QUICK(1, required=True).listed is not QUICK(1, required=True).listed


def test_quick_init_refuses_what_the_dataclass_refuses() -> None:
    with pytest.raises(TypeError):
        QUICK(1, 2, 3, 4, required=True)
    with pytest.raises(TypeError):
        QUICK(1)  # required is required


def test_a_quick_value_stays_frozen() -> None:
    value = QUICK(1, required=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.first = 2


def test_a_quick_value_is_replaced_and_compared_as_a_dataclass() -> None:
    value = QUICK(1, required=True)
    changed = dataclasses.replace(value, second="z")
    assert changed.second == "z"
    assert changed.hidden == "1z"
    assert dataclasses.replace(changed, second="b") == value


def test_a_quick_value_hashes_as_the_dataclass_makes_it() -> None:
    assert hash(messages.Usage(1, 2)) == hash((1, 2, 0))


def test_a_quick_value_is_shown_as_the_dataclass_shows_it() -> None:
    quick, plain = QUICK(1, "x", [2], required=True), PLAIN(1, "x", [2], required=True)
    assert repr(quick) == repr(plain).replace(PLAIN.__qualname__, QUICK.__qualname__)
    assert type(quick) is QUICK


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_quick_value_pickles_to_an_equal_value(protocol: int) -> None:
    value = records.ToolCallRecord("noop", {"a": 1}, {"ok": True}, 2.0, True, None, 1, "c1")
    again = pickle.loads(pickle.dumps(value, protocol))
    assert again == value
    assert type(again) is records.ToolCallRecord


_V = TypeVar("_V")


@quick_init
@dataclasses.dataclass(frozen=True, slots=True)
class _Boxed(Generic[_V]):
    """A generic value: its twin must name the same base (``Generic[...]``, as ``typing``
    requires of a subclass) for the value to move into the class."""

    content: _V


def test_a_generic_quick_value_is_built_frozen() -> None:
    value = _Boxed(3)
    assert (value.content, type(value)) == (3, _Boxed)
    assert value == _Boxed(3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.content = 4  # type: ignore[misc]


def test_a_quick_value_is_copied_to_an_equal_value() -> None:
    value = QUICK(1, "x", [2], required=True)
    assert copy.copy(value) == value
    deep = copy.deepcopy(value)
    assert deep == value
    assert deep.listed is not value.listed
    with pytest.raises(dataclasses.FrozenInstanceError):
        deep.first = 2


def test_a_subclass_not_decorated_is_built_as_the_dataclass_builds_it() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Wider(messages.ToolCall):
        extra: int = 0

    class Same(messages.ToolCall):
        pass

    wider = Wider("c1", "noop", {}, None, 3)
    assert (wider.id, wider.extra, type(wider)) == ("c1", 3, Wider)
    same = Same("c1", "noop")
    assert (same.id, same.name, same.arguments, type(same)) == ("c1", "noop", {}, Same)
    with pytest.raises(dataclasses.FrozenInstanceError):
        wider.extra = 1  # type: ignore[misc]


def test_quick_init_refuses_a_class_that_is_not_a_frozen_slotted_dataclass() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(slots=True)
    class NotFrozen:
        a: int

    for cls in (NoSlots, NotFrozen, int):
        with pytest.raises(TypeError):
            quick_init(cls)


def test_quick_init_refuses_an_init_only_variable() -> None:
    @quick_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class WithInitVar:
        a: int
        scale: dataclasses.InitVar[int] = 1

    with pytest.raises(TypeError):
        WithInitVar(1)


def test_the_quick_new_is_made_once_with_the_first_value() -> None:
    @quick_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class Once:
        a: int

    stand_in = _new_of(Once)
    assert Once(1).a == 1
    made = _new_of(Once)
    assert made is not stand_in
    assert Once(2).a == 2
    assert _new_of(Once) is made


QUICK_CORE_VALUES = [
    cls
    for module in (events, messages, records)
    for cls in vars(module).values()
    if dataclasses.is_dataclass(cls) and isinstance(cls, type) and cls.__module__ == module.__name__
] + [CallScope]


@pytest.mark.parametrize("cls", QUICK_CORE_VALUES, ids=lambda cls: cls.__name__)
def test_the_core_values_are_quick(cls: type) -> None:
    made_by = _new_of(cls).__code__.co_filename
    assert made_by in (inspect.getfile(quick_init), f"<quick_init of {cls.__qualname__}>")
