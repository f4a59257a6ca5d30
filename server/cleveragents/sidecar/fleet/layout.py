"""The Redis run store's layout: its key names, how a run's stream reads back, and its URL
as logs may show it.

Every key starts with the deployment's prefix (``Keys``). Every key of one run carries the
hash tag ``{run_id}`` (Redis Cluster hashes only what is between the braces), so that a run's
stream, hash and set-aside copy share one shard. A sidecar's own keys carry its id as their
tag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio

from cleveragents.sidecar.fleet.mirrors import HeldRun
from cleveragents.sidecar.identity import DEFAULT_IDENTITY
from cleveragents.sidecar.runs.run import is_terminal
from cleveragents.sidecar.runs.store import StoredRun
from cleveragents.wire import decode_frame

__all__ = [
    "DEFAULT_PREFIX",
    "Keys",
    "ended",
    "frames_of",
    "read_stored",
    "redacted",
    "stored_runs",
]

#: Every key the store writes starts with a prefix (``event_store_key_prefix``), this one
#: unless set.
DEFAULT_PREFIX = "cleveragents"
#: How many runs start-up reads back in one round trip.
_LOAD_CHUNK = 200
#: What XRANGE answers.
_Entries = list[tuple[bytes, dict[bytes, bytes]]]


@dataclass(frozen=True, slots=True)
class Keys:
    """The names of one deployment's keys: each starts with ``prefix``, so that deployments
    sharing one Redis (each with its own prefix) see nothing of each other's runs, leases
    and control streams."""

    prefix: str = DEFAULT_PREFIX

    @property
    def index(self) -> str:
        """The sorted set of stored runs (score: when the run's first frame was written)."""
        return f"{self.prefix}:runs"

    @property
    def quarantined(self) -> str:
        """The set of runs set aside because their logs could not be read back."""
        return f"{self.prefix}:quarantined"

    @property
    def sidecars(self) -> str:
        """The set of sidecar ids that have registered with the store and not left cleanly."""
        return f"{self.prefix}:sidecars"

    def log(self, run_id: str) -> str:
        """The stream holding a run's frames (entry ids ``<sequence>-0``)."""
        return f"{self.prefix}:run:{{{run_id}}}:log"

    def meta(self, run_id: str) -> str:
        """The hash holding a run's owner identity and the id of the sidecar that runs it."""
        return f"{self.prefix}:run:{{{run_id}}}:meta"

    def quarantine(self, run_id: str) -> str:
        """Where a run's stream goes when it cannot be read back (same slot: a rename)."""
        return f"{self.prefix}:run:{{{run_id}}}:quarantine"

    def lease(self, sidecar: str) -> str:
        """A sidecar's lease: present (with a time to live) while the sidecar heartbeats."""
        return f"{self.prefix}:sidecar:{{{sidecar}}}:lease"

    def runs_of(self, sidecar: str) -> str:
        """The set of runs a sidecar started (or adopted) and has not forgotten."""
        return f"{self.prefix}:sidecar:{{{sidecar}}}:runs"

    def control(self, sidecar: str) -> str:
        """The stream of cancels and approval decisions other sidecars send a sidecar."""
        return f"{self.prefix}:sidecar:{{{sidecar}}}:control"

    def adopter(self, sidecar: str) -> str:
        """Taken (``SET NX``) by the one sidecar that adopts a dead sidecar's runs."""
        return f"{self.prefix}:sidecar:{{{sidecar}}}:adopter"


def redacted(url: str) -> str:
    """``url`` without its password, for logs and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:***@" if parts.username else "***@"
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=user + host))


def stored_runs(
    client: redis.Redis, keys: Keys, only: list[str] | None = None
) -> list[tuple[StoredRun, str]]:
    """Every indexed run (or those of ``only``), oldest first, with its gap-free frames and
    the sidecar running it."""
    if only is None:
        only = [item.decode() for item in cast("list[bytes]", client.zrange(keys.index, 0, -1))]
    runs: list[tuple[StoredRun, str]] = []
    for start in range(0, len(only), _LOAD_CHUNK):
        chunk = only[start : start + _LOAD_CHUNK]
        with client.pipeline(transaction=False) as pipe:
            for run_id in chunk:
                pipe.xrange(keys.log(run_id))
                pipe.hmget(keys.meta(run_id), ["owner", "sidecar", "resume"])
            answers = pipe.execute()
        for index, run_id in enumerate(chunk):
            frames = frames_of(answers[2 * index])
            owner, sidecar, resume = answers[2 * index + 1]
            if frames:
                name = owner.decode() if owner else DEFAULT_IDENTITY.name
                stored = StoredRun(run_id, frames, name, resume.decode() if resume else "")
                runs.append((stored, sidecar.decode() if sidecar else ""))
    return runs


async def read_stored(client: redis.asyncio.Redis, keys: Keys, run_ids: list[str]) -> list[HeldRun]:
    """The stored runs of ``run_ids`` there are (unknown ones left out), each with the sidecar
    that runs (or ran) it: one round trip."""
    if not run_ids:
        return []
    async with client.pipeline(transaction=False) as pipe:
        for run_id in run_ids:
            pipe.xrange(keys.log(run_id))
            pipe.hmget(keys.meta(run_id), ["owner", "sidecar", "resume"])
        answers = await pipe.execute()
    found = []
    for index, run_id in enumerate(run_ids):
        frames = frames_of(answers[2 * index])
        if frames:
            owner, sidecar, resume = answers[2 * index + 1]
            name = owner.decode() if owner else DEFAULT_IDENTITY.name
            stored = StoredRun(run_id, frames, name, resume.decode() if resume else "")
            found.append(HeldRun(stored, sidecar.decode() if sidecar else ""))
    return found


def ended(frames: list[bytes]) -> bool:
    """Whether a log ends with its terminal event (one whose last frame does not decode is
    taken as live: reading it back sets it aside, ``RunManager.take_back``)."""
    try:
        return is_terminal(decode_frame(frames[-1]).event)
    except Exception:  # damaged data: the run's reader reports it
        return False


def frames_of(entries: _Entries) -> list[bytes]:
    """The gap-free frames of a stream's entries (``<seq>-0`` ids), from sequence 1 on."""
    frames: list[bytes] = []
    for entry_id, fields in entries:
        if int(entry_id.split(b"-", 1)[0]) != len(frames) + 1:
            break  # a gap can only follow a torn pipeline: stop there
        frames.append(fields[b"f"])
    return frames
