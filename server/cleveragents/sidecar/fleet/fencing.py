"""Fencing on the Redis store: a run's frames are written only by the sidecar that owns it now.

A run's hash holds the sidecar that runs it (``sidecar``), a *fencing token* (``epoch``) that
goes up by one each time a sidecar claims the run, and whether the run waits, parked, for its
Session client (``parked``: ``1``). Every write to a run goes through a Lua script that checks
the hash first, as redis-py's ``Lock`` checks its token before it extends or releases:

- ``APPEND`` writes a frame only if the hash still names the writer with the token it claimed.
  A sidecar that stalled past its lease (``SIGSTOP``, a long pause) and whose runs another
  sidecar adopted finds its frames refused, the terminal one too, and stops its copy.
- ``CLAIM`` takes a run from the sidecar the hash must still name (an adoption of a dead
  sidecar's runs, a restart taking its own back): a new token.
- ``TAKE`` is the hand-over: a sidecar a Session client re-attached to takes the run if it is
  parked (whoever holds it) for that client's identity, in one compare-and-set, with a new
  token. The old holder takes no part: its next write is fenced, and it finds out at its
  next lease renewal (it checks its parked runs), or when a client re-attaches there.
- ``PARK`` and ``HOLD`` are the holder's: a run parks (claimable by ``TAKE``) and is held back
  for a client re-attaching to the holder itself, each only while the hash names the holder
  with its token, so that exactly one sidecar gets the run's next client.

Both keys of ``APPEND`` share the run's hash tag, so a Redis Cluster runs it on one shard.
Appends go by the script's digest (``EVALSHA``: the body is not sent with every frame); the
store sends the body again to a Redis that lost its script cache (restarted). The others are
rare and go by ``EVAL``.

**One primary.** The fencing holds while one Redis primary takes every write: a token raised
there is seen by the next write. With asynchronous replicas, a failover can lose the last
writes acknowledged by the old primary, a token's increment among them, and a stale sidecar
would then write again. Run the store on one primary (Redis persistence protects a restart),
or make the increment durable before acting on it: Redis ``WAIT numreplicas timeout`` after a
claim, or ``min-replicas-to-write`` on the primary.
"""

from __future__ import annotations

import hashlib
from typing import Any

import structlog

__all__ = [
    "APPEND", "APPEND_SHA", "CLAIM", "FENCED_PREFIX", "GONE", "HOLD", "PARK", "TAKE",
    "WRITTEN", "Claims", "fenced_by", "gone_message", "handed_over_message",
    "taken_over_message",
]  # fmt: skip

log = structlog.get_logger("cleveragents.sidecar.store")

#: KEYS: the run's stream and hash; ARGV: sequence, frame, sidecar, token, then (sequence 1
#: only) the owner identity and the resume information. Answers 1 (written), 0 (the stream
#: already holds the sequence: an earlier try was written), ``fenced:<sidecar>``, or ``gone``:
#: the run's hash or stream is not there (its keys vanished: a flush, an eviction, a restart
#: without persistence), which no sidecar's claim does.
APPEND = """
local seq = tonumber(ARGV[1])
local meta = redis.call('HMGET', KEYS[2], 'sidecar', 'epoch')
local logged = redis.call('EXISTS', KEYS[1]) == 1
if seq == 1 and not logged then
  redis.call('HSET', KEYS[2], 'owner', ARGV[5], 'sidecar', ARGV[3], 'resume', ARGV[6],
             'epoch', ARGV[4])
elseif not meta[1] or not logged then
  return 'gone'
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

#: KEYS: the run's hash; ARGV: the sidecar taking it, the identity that must own it, and the
#: identity a hash without one belongs to. Takes the run if it is parked (or the hash names
#: the taker already: a take whose answer was lost); answers ``{token, previous sidecar}``,
#: or ``{0, the sidecar holding it}``.
TAKE = """
local meta = redis.call('HMGET', KEYS[1], 'sidecar', 'parked', 'owner')
local holder = meta[1] or ''
if (meta[3] or ARGV[3]) ~= ARGV[2] then return {0, holder} end
if meta[2] ~= '1' and holder ~= ARGV[1] then return {0, holder} end
redis.call('HSET', KEYS[1], 'sidecar', ARGV[1], 'parked', '')
return {redis.call('HINCRBY', KEYS[1], 'epoch', 1), holder}
"""

#: KEYS: the run's hash; ARGV: the holder and its token. Marks the run parked; answers 1, or 0
#: when the hash no longer names the holder with that token.
PARK = """
local meta = redis.call('HMGET', KEYS[1], 'sidecar', 'epoch')
if meta[1] ~= ARGV[1] or meta[2] ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'parked', '1')
return 1
"""

#: KEYS: the run's hash; ARGV: the holder and its token. Holds a parked run back for a client
#: re-attaching to the holder (no ``TAKE`` gets it now); answers ``''``, the sidecar the
#: hash names instead, or ``false`` (nil): there is no hash (its keys vanished).
HOLD = """
local meta = redis.call('HMGET', KEYS[1], 'sidecar', 'epoch')
if not meta[1] then return false end
if meta[1] ~= ARGV[1] or meta[2] ~= ARGV[2] then return meta[1] end
redis.call('HSET', KEYS[1], 'parked', '')
return ''
"""

#: What ``APPEND`` answers for a frame it refused, before the sidecar that owns the run now.
FENCED_PREFIX = b"fenced:"
#: What ``APPEND`` answers for a frame of a run whose keys are gone.
GONE = b"gone"
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


def gone_message(run_id: str, store: str) -> str:
    """What the streams of a run whose keys vanished from the store are told."""
    return (
        f"run {run_id!r}: its log is gone from the run store {store} (its keys vanished: a "
        "FLUSHALL or FLUSHDB, an eviction under maxmemory, or Redis restarted without "
        "persistence); the run was stopped and failed here, this sidecar keeps what it had "
        "of it (GetRun, GetRunHistory, WatchRun here) and no other sidecar knows it. Give "
        "the store persistence (appendonly yes), maxmemory-policy noeviction, and a database "
        "no one else flushes"
    )


def handed_over_message(run_id: str, me: str, to: str) -> str:
    """What the streams of a parked run another sidecar took (``TAKE``) are told."""
    return (
        f"run {run_id!r} was handed over to sidecar {to!r}, where its client re-attached: "
        f"its copy on this sidecar ({me!r}) stopped; follow the run with WatchRun, FollowRun "
        "or GetRun on any sidecar sharing the store"
    )


class Claims:
    """The fencing tokens this sidecar holds, by run, and which of its runs it parked.

    The store writes each frame with its run's token, the lease claims runs at start-up and
    from dead sidecars, and a hand-over takes one: all of them keep the tokens here. ``lost``
    is the one place a loss is counted and logged.
    """

    def __init__(self, sidecar_id: str) -> None:
        self.sidecar_id = sidecar_id
        #: The token this sidecar claimed each of its runs with.
        self.tokens: dict[str, int] = {}
        #: The runs this sidecar marked parked (``PARK``): another sidecar may take them.
        self.parked: set[str] = set()
        #: Runs another sidecar took from this one (a metric).
        self.lost_runs = 0
        #: This sidecar's runs whose keys vanished: their frames are no longer written.
        self.gone: set[str] = set()

    def hold(self, run_id: str, token: int) -> None:
        """This sidecar claimed ``run_id`` with ``token``."""
        self.tokens[run_id] = token

    def drop(self, run_id: str) -> None:
        """This sidecar no longer holds ``run_id`` (forgotten, or set aside)."""
        self.tokens.pop(run_id, None)
        self.parked.discard(run_id)
        self.gone.discard(run_id)

    def vanished(self, run_id: str, store: str) -> str | None:
        """The keys of ``run_id`` are gone from ``store``: the message its streams end with,
        or ``None`` if this sidecar knew already (or does not hold it). Logged once."""
        if run_id in self.gone or self.tokens.pop(run_id, None) is None:
            return None
        self.parked.discard(run_id)
        self.gone.add(run_id)
        log.error("a run's keys vanished from the store: its log is lost", run_id=run_id)
        return gone_message(run_id, store)

    def lost(self, run_id: str, by: str) -> str | None:
        """Another sidecar (``by``) owns ``run_id`` now: the message its streams end with, or
        ``None`` if this sidecar did not hold it (it knew already). Counted and logged once."""
        if self.tokens.pop(run_id, None) is None:
            return None
        self.lost_runs += 1
        if run_id in self.parked:
            self.parked.discard(run_id)
            log.info("run handed over", run_id=run_id, to=by)
            return handed_over_message(run_id, self.sidecar_id, by)
        log.error("store lease lost: a run was taken over", run_id=run_id, by=by)
        return taken_over_message(run_id, self.sidecar_id, by)
