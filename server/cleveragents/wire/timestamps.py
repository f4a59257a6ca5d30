"""``Timestamp`` and ``Duration`` fields from and to seconds."""

from __future__ import annotations

import time

from google.protobuf import duration_pb2, timestamp_pb2

__all__ = ["duration", "seconds_of", "set_time", "timestamp"]


def timestamp(seconds: float | None = None) -> timestamp_pb2.Timestamp:
    """A Timestamp for a Unix time in seconds (now when omitted)."""
    ts = timestamp_pb2.Timestamp()
    set_time(ts, seconds)
    return ts


def set_time(ts: timestamp_pb2.Timestamp, seconds: float | None = None) -> None:
    """Set ``ts`` (a field of a message being built) in place: no temporary message."""
    ns = time.time_ns() if seconds is None else int(seconds * 1e9)
    ts.seconds, ts.nanos = divmod(ns, 1_000_000_000)


def seconds_of(ts: timestamp_pb2.Timestamp) -> float:
    """A Timestamp as Unix seconds."""
    return ts.seconds + ts.nanos / 1e9


def duration(seconds: float) -> duration_pb2.Duration:
    """A Duration of ``seconds``."""
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d
