"""Fencing on the Redis store: a run's frames are written only by the sidecar that owns it now.

A run's hash holds the sidecar that runs it (``sidecar``) and a *fencing token* (``epoch``)
that goes up by one each time a sidecar claims the run (adopts it, or takes it back at a
restart). Each frame is written by a Lua script that appends it only if the hash still names
the writer and the token it claimed with: a sidecar that stalled past its lease (``SIGSTOP``,
a long pause) and whose runs another sidecar adopted finds its frames refused, the terminal
one too, and stops its copy of those runs. Both keys of the script share the run's hash tag,
so a Redis Cluster runs it on one shard.

Appends go by the script's digest (``EVALSHA``: the body is not sent with every frame); the
store sends the body again to a Redis that lost its script cache (restarted). Claims are
rare and go by ``EVAL``.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = [
    "APPEND", "APPEND_SHA", "CLAIM", "FENCED_PREFIX", "WRITTEN", "fenced_by", "taken_over_message",
]  # fmt: skip

#: KEYS: the run's stream and hash; ARGV: sequence, frame, sidecar, token, then (sequence 1
#: only) the owner identity and the resume information. Answers 1 (written), 0 (the stream
#: already holds the sequence: an earlier try was written), or ``fenced:<sidecar>``.
APPEND = """
local seq = tonumber(ARGV[1])
local meta = redis.call('HMGET', KEYS[2], 'sidecar', 'epoch')
if seq == 1 and redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[2], 'owner', ARGV[5], 'sidecar', ARGV[3], 'resume', ARGV[6],
             'epoch', ARGV[4])
elseif meta[1] ~= ARGV[3] or meta[2] ~= ARGV[4] then
  return 'fenced:' .. (meta[1] or '')
end
local added = redis.pcall('XADD', KEYS[1], ARGV[1] .. '-0', 'f', ARGV[2])
if type(added) == 'table' and added.err then
  if string.find(added.err, 'equal or smaller', 1, true) then return 0 end
  return added
end
return 1
"""

#: The digest Redis knows ``APPEND`` by (``SCRIPT LOAD`` answers the same).
APPEND_SHA = hashlib.sha1(APPEND.encode(), usedforsecurity=False).hexdigest()

#: KEYS: the run's hash; ARGV: the sidecar claiming it, and the sidecar it must still name.
#: Answers the new fencing token, or ``false`` (nil) when the run is no longer that sidecar's.
CLAIM = """
if (redis.call('HGET', KEYS[1], 'sidecar') or '') ~= ARGV[2] then return false end
redis.call('HSET', KEYS[1], 'sidecar', ARGV[1])
return redis.call('HINCRBY', KEYS[1], 'epoch', 1)
"""

#: What ``APPEND`` answers for a frame it refused, before the sidecar that owns the run now.
FENCED_PREFIX = b"fenced:"
#: The token a new run's first frame writes (claims raise it from there).
WRITTEN = 1


def fenced_by(answer: Any) -> str | None:
    """The sidecar that owns the run now if ``answer`` (to ``APPEND``) refused the frame."""
    if isinstance(answer, bytes) and answer.startswith(FENCED_PREFIX):
        return answer[len(FENCED_PREFIX) :].decode() or "none"
    return None


def taken_over_message(run_id: str, me: str, owner: str) -> str:
    """What the clients of a run this sidecar lost are told, and what it logs."""
    return (
        f"run {run_id!r} was taken over by sidecar {owner!r} sharing the run store: this "
        f"sidecar ({me!r}) lost its store lease (stalled, or cut off from Redis, for longer "
        "than event_store_lease_s) and stopped its copy of the run; follow the run with "
        "WatchRun, FollowRun or GetRun on any sidecar sharing the store"
    )
