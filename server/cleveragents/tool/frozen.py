"""Frozen values made at near the cost of plain ones: :func:`quick_init`.

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__`` (the
class's own ``__setattr__`` refuses every store), which costs CPython 3.11 some 1,400
instructions a field; one iteration of the loop makes about fifty fields of events, messages
and records. :func:`quick_init` gives a frozen, slotted dataclass an ``__init__`` with the same
parameters that stores each field through its slot's descriptor instead, for about 60% of
that (counted under callgrind: 10.0k -> 5.9k instructions for six fields). Everything else,
the refusing ``__setattr__``, equality, hashing, ``repr`` and ``dataclasses.replace``, is the
dataclass's own.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from typing import Any, TypeVar

__all__ = ["quick_init"]

_T = TypeVar("_T")
#: The names the made ``__init__`` uses besides the fields'.
_HELPERS = ("_MISSING", "_set_", "_default_", "_factory_")


def quick_init(cls: type[_T]) -> type[_T]:
    """Give ``cls``, a ``@dataclass(frozen=True, slots=True)`` class, the quicker
    ``__init__`` (which calls its ``__post_init__``, if any, as the dataclass's does);
    ``TypeError`` for any other class.

    The ``__init__`` is made when the first instance is (a class never used costs its
    module's import nothing more); until then a stand-in makes it, then calls it.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen dataclass with slots")
    dataclass_init = cls.__dict__["__init__"]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        made = cls.__dict__["__init__"]
        if made is __init__:
            made = _made_init(cls, dataclass_init)
            type.__setattr__(cls, "__init__", made)
        made(self, *args, **kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    type.__setattr__(cls, "__init__", __init__)
    return cls


def _made_init(cls: type, dataclass_init: Any) -> Any:
    """``cls``'s quicker ``__init__``, taking the parameters ``dataclass_init`` takes."""
    fields = dataclasses.fields(cls)
    wanted = [f.name for f in fields if f.init]
    # An InitVar is a parameter but not a field: the signatures would differ.
    if list(inspect.signature(dataclass_init).parameters)[1:] != wanted:
        raise TypeError(f"{cls.__name__}'s __init__ takes more than its fields")
    if any(name.startswith(_HELPERS) for name in wanted):
        raise TypeError(f"{cls.__name__} has a field named like quick_init's own names")
    me = "__dataclass_self__" if "self" in wanted else "self"  # as the dataclass names it
    namespace: dict[str, Any] = {"_MISSING": dataclasses.MISSING}
    positional: list[str] = []
    keywords: list[str] = []
    body: list[str] = []
    for index, field in enumerate(fields):
        value = field.name
        if field.default is not dataclasses.MISSING:
            namespace[f"_default_{index}"] = field.default
            param = f"{field.name}=_default_{index}"
            if not field.init:
                value = f"_default_{index}"
        elif field.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{index}"] = field.default_factory
            param = f"{field.name}=_MISSING"
            value = f"_factory_{index}() if {field.name} is _MISSING else {field.name}"
            if not field.init:
                value = f"_factory_{index}()"
        elif field.init:
            param = field.name
        else:
            continue  # no value at all: left unset, as the dataclass leaves it
        if field.init:
            (keywords if field.kw_only else positional).append(param)
        namespace[f"_set_{index}"] = _slot(cls, field.name).__set__
        body.append(f"    _set_{index}({me}, {value})")
    if hasattr(cls, "__post_init__"):
        body.append(f"    {me}.__post_init__()")
    keywords = ["*", *keywords] if keywords else []
    signature = ", ".join([me, *positional, *keywords])
    source = f"def __init__({signature}):\n" + ("\n".join(body) or "    pass") + "\n"
    # Made here from the field names alone; the file name says where the code came from.
    exec(compile(source, f"<quick_init of {cls.__qualname__}>", "exec"), namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = dict(dataclass_init.__annotations__)
    init.__doc__ = dataclass_init.__doc__
    return init


def _slot(cls: type, name: str) -> Any:
    """The member descriptor of ``cls``'s slot ``name`` (defined by it or a base)."""
    for klass in cls.__mro__:
        found = klass.__dict__.get(name)
        if isinstance(found, types.MemberDescriptorType):
            return found
    raise TypeError(f"{cls.__name__}.{name} is not a slot")
