"""Frozen values made at near the cost of plain ones: :func:`quick_init`.

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__`` (the
class's own ``__setattr__`` refuses every store), which costs CPython 3.11 some 1,400
instructions a field; one iteration of the loop makes about fifty fields of events, messages
and records. :func:`quick_init` makes a frozen, slotted dataclass's values another way: its
``__new__`` (same parameters as the dataclass's ``__init__``, which it replaces) fills an
instance of an unfrozen twin, a class with the same slots, by plain stores, then moves it into
the frozen class (``__class__``, which CPython allows between classes of one layout). Counted
under callgrind, six fields: 10.5k instructions through the dataclass's ``__init__``, 6.4k
storing through the slots' descriptors (this module's first way), 4.2k through the twin.
Everything else, the refusing ``__setattr__``, equality, hashing, ``repr``, pickling and
``dataclasses.replace``, is the dataclass's own: only how a value is first filled differs.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, TypeVar

__all__ = ["quick_init"]

_T = TypeVar("_T")
#: The prefix of the names the made ``__new__`` uses besides the fields'.
_HELPER = "_qi_"
_new_object = object.__new__


def quick_init(cls: type[_T]) -> type[_T]:
    """Make ``cls``, a ``@dataclass(frozen=True, slots=True)`` class, build its values through
    an unfrozen twin (its ``__post_init__``, if any, runs as the dataclass's ``__init__``
    would run it); ``TypeError`` for any other class. A subclass that is not decorated too is
    built as the dataclass builds it.

    The ``__new__`` is made when the first value is (a class never used costs its module's
    import nothing more); until then a stand-in makes it, then calls it.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen dataclass with slots")
    if "__new__" in cls.__dict__ and not getattr(cls.__new__, "_qi_subclass", False):
        raise TypeError(f"{cls.__name__} has a __new__ of its own")
    if "__init_subclass__" in cls.__dict__:
        raise TypeError(f"{cls.__name__} has an __init_subclass__ of its own")
    dataclass_init = cls.__dict__["__init__"]

    def __new__(klass: type, *args: Any, **kwargs: Any) -> Any:
        if klass is not cls:
            return _subclass_new(klass, *args, **kwargs)
        made = cls.__dict__["__new__"].__func__
        if made is __new__:
            made = _made_new(cls, dataclass_init)
            type.__setattr__(cls, "__new__", staticmethod(made))
        return made(klass, *args, **kwargs)

    def _subclass_new(klass: type, *args: Any, **kwargs: Any) -> Any:
        """A value of a subclass not decorated itself: as the dataclass makes one (with the
        subclass's own ``__init__``, else ``cls``'s, which ``cls`` itself no longer has)."""
        value: Any = _new_object(klass)
        if klass.__init__ is object.__init__:  # type: ignore[misc]
            dataclass_init(value, *args, **kwargs)
        return value

    def __init_subclass__(klass: type, /, **kwargs: Any) -> None:
        super(cls, klass).__init_subclass__(**kwargs)  # type: ignore[misc]
        if "__new__" not in klass.__dict__ or getattr(klass.__new__, "_qi_subclass", False):
            type.__setattr__(klass, "__new__", staticmethod(_subclass_new))

    def __getnewargs_ex__(self: Any) -> tuple[tuple[()], dict[str, Any]]:
        """What a pickled value is made again from: its fields' values."""
        return (), {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}

    _subclass_new._qi_subclass = True  # type: ignore[attr-defined]
    __new__.__qualname__ = f"{cls.__qualname__}.__new__"
    __new__.__wrapped__ = dataclass_init  # type: ignore[attr-defined]  # its signature
    type.__setattr__(cls, "__new__", staticmethod(__new__))
    type.__setattr__(cls, "__init_subclass__", classmethod(__init_subclass__))
    if "__getnewargs_ex__" not in cls.__dict__:
        type.__setattr__(cls, "__getnewargs_ex__", __getnewargs_ex__)
    # object's (a C no-op, not a base's): the __new__ has filled the value.
    type.__setattr__(cls, "__init__", object.__init__)
    return cls


def _made_new(cls: type, dataclass_init: Any) -> Any:
    """``cls``'s quicker ``__new__``, taking the parameters ``dataclass_init`` takes."""
    fields = dataclasses.fields(cls)
    wanted = [f.name for f in fields if f.init]
    # An InitVar is a parameter but not a field: the signatures would differ.
    if list(inspect.signature(dataclass_init).parameters)[1:] != wanted:
        raise TypeError(f"{cls.__name__}'s __init__ takes more than its fields")
    if any(name.startswith(_HELPER) for name in wanted):
        raise TypeError(f"{cls.__name__} has a field named like quick_init's own names")
    extra: dict[str, Any] = {}
    if "__orig_bases__" in cls.__dict__:  # a Generic[...] value: its base, as ``cls`` names it
        extra["__orig_bases__"] = cls.__dict__["__orig_bases__"]
    twin = type(
        f"_Unfrozen{cls.__name__}",
        cls.__bases__,
        {
            **extra,
            "__slots__": cls.__dict__["__slots__"],
            "__setattr__": object.__setattr__,  # both: or stores take the slow path
            "__delattr__": object.__delattr__,
            "__module__": cls.__module__,
        },
    )
    namespace: dict[str, Any] = {
        "_qi_MISSING": dataclasses.MISSING,
        "_qi_cls": cls,
        "_qi_twin": twin,
        "_qi_new": _new_object,
    }
    positional: list[str] = []
    keywords: list[str] = []
    body = ["    _qi_self = _qi_new(_qi_twin)"]
    for index, field in enumerate(fields):
        value = field.name
        if field.default is not dataclasses.MISSING:
            namespace[f"_qi_default_{index}"] = field.default
            param = f"{field.name}=_qi_default_{index}"
            if not field.init:
                value = f"_qi_default_{index}"
        elif field.default_factory is not dataclasses.MISSING:
            namespace[f"_qi_factory_{index}"] = field.default_factory
            param = f"{field.name}=_qi_MISSING"
            value = f"_qi_factory_{index}() if {field.name} is _qi_MISSING else {field.name}"
            if not field.init:
                value = f"_qi_factory_{index}()"
        elif field.init:
            param = field.name
        else:
            continue  # no value at all: left unset, as the dataclass leaves it
        if field.init:
            (keywords if field.kw_only else positional).append(param)
        body.append(f"    _qi_self.{field.name} = {value}")
    body.append("    _qi_self.__class__ = _qi_cls")
    if hasattr(cls, "__post_init__"):
        body.append("    _qi_self.__post_init__()")
    body.append("    return _qi_self")
    keywords = ["*", *keywords] if keywords else []
    signature = ", ".join(["_qi_klass", *positional, *keywords])
    source = f"def __new__({signature}):\n" + "\n".join(body) + "\n"
    # Made here from the field names alone; the file name says where the code came from.
    exec(compile(source, f"<quick_init of {cls.__qualname__}>", "exec"), namespace)
    new = namespace["__new__"]
    new.__qualname__ = f"{cls.__qualname__}.__new__"
    new.__annotations__ = dict(dataclass_init.__annotations__)
    new.__doc__ = dataclass_init.__doc__
    new.__wrapped__ = dataclass_init  # its signature, for inspect
    return new
