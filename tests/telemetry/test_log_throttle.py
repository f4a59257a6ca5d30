"""A repeated warning goes to the log at most once an interval; the rest are counted, and the
count goes with the next line that is logged (or ``flush``)."""

from __future__ import annotations

import pytest

from cleveragents.sidecar.observability.throttle import LogThrottle


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_warning_of_an_interval_is_logged_and_the_rest_counted() -> None:
    clock = Clock()
    throttle = LogThrottle(1.0, clock)

    first = throttle.admit()
    within = [throttle.admit() for _ in range(5)]
    clock.now += 1.0
    next_line = throttle.admit()

    assert first == 0
    assert within == [None] * 5
    assert next_line == 5


def test_flush_gives_the_count_not_logged_once() -> None:
    throttle = LogThrottle(60.0, Clock())
    throttle.admit()
    throttle.admit()
    throttle.admit()

    assert throttle.flush() == 2
    assert throttle.flush() == 0


def test_an_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval_s must be positive"):
        LogThrottle(0.0)
