"""The event loop the sidecar serves on: uvloop where it is installed, else asyncio's own.

uvloop runs the loop's own machinery (scheduling callbacks, timers, waking up when gRPC's
poller thread signals a completed operation) in C. The sidecar does that work several times
per iteration, so uvloop takes roughly a tenth off its CPU per iteration; the README's
performance section has the measurements. The sidecar behaves the same on either loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from cleveragents.sidecar.errors import ConfigError

__all__ = ["EVENT_LOOPS", "LoopFactory", "check_event_loop", "loop_factory", "running_loop_name"]

#: The values of the ``event_loop`` setting.
EVENT_LOOPS = ("auto", "asyncio", "uvloop")

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def check_event_loop(choice: str) -> None:
    """Raise ``ConfigError`` unless ``choice`` is one of ``EVENT_LOOPS``."""
    if choice not in EVENT_LOOPS:
        raise ConfigError(f"event_loop must be one of {', '.join(EVENT_LOOPS)}, not {choice!r}")


def loop_factory(choice: str) -> tuple[str, LoopFactory]:
    """The loop ``choice`` stands for (``auto``: uvloop if installed) and a factory of it.

    Raises ``ConfigError`` for a choice not in ``EVENT_LOOPS``, and for ``uvloop`` when uvloop
    cannot be imported.
    """
    check_event_loop(choice)
    if choice == "asyncio":
        return "asyncio", asyncio.new_event_loop
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ConfigError(
                "event_loop is 'uvloop' but uvloop cannot be imported: install it "
                "(pip install uvloop), or set event_loop to 'auto' or 'asyncio'"
            ) from None
        return "asyncio", asyncio.new_event_loop
    return "uvloop", uvloop.new_event_loop


def running_loop_name() -> str:
    """The kind of the running loop, for the startup log line: ``uvloop``, ``asyncio``, or
    the top-level module of any other loop an embedding program runs the sidecar on."""
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]
