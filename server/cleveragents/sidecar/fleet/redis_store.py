"""Run logs on a Redis server, so that they outlive the sidecar and its machine.

Each run is a Redis Stream whose entry ids carry the sequence (``<seq>-0``: Redis refuses an
id that is not above the last, so a log can take no duplicate and no out-of-order frame); a
hash beside it holds the run's owner; a sorted set indexes the runs by their start, for
start-up and retention. Every key of one run shares the hash tag ``{run_id}``, so a Redis
Cluster keeps a run on one shard.

Frames are written in groups by one task (whatever arrives while one pipeline is in flight
goes into the next) and released once Redis has answered for them: an event reaches a client
only after Redis holds it. How much of that survives a Redis crash is Redis's persistence
setting: with ``appendonly yes`` and ``appendfsync always`` every acknowledged frame is on
disk; with ``everysec`` (Redis's default) a killed ``redis-server`` loses nothing (the write
reached the OS before the answer) but a power loss may lose the last second; without AOF a
restart loses what came after the last snapshot.

A pipeline that fails (Redis gone, out of memory, read-only) follows the store-failure rules
of ``SqliteEventStore``: the store turns *failing*, tells its listeners, releases what it
holds, and sends the same frames again every ``retry_interval_s``; a frame Redis already
holds (the answer to an earlier try was lost) is refused as not above the stream's last id,
which counts as written.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio
import structlog
from redis.exceptions import NoScriptError, RedisError, ResponseError

from cleveragents.sidecar.errors import ConfigError
from cleveragents.sidecar.fleet.fencing import (
    APPEND,
    APPEND_SHA,
    GONE,
    WRITTEN,
    Claims,
    fenced_by,
)
from cleveragents.sidecar.fleet.layout import (
    redacted,
)
from cleveragents.sidecar.fleet.lease import Lease
from cleveragents.sidecar.runs.store import LogOwner, StoredRun, StoreListener

__all__ = ["RedisEventStore", "redis_options"]

log = structlog.get_logger("cleveragents.sidecar.store")

#: How often a failing store sends its unwritten frames again.
RETRY_INTERVAL_S = 1.0
#: A sidecar's lease lasts this long unrenewed (see ``lease``).
LEASE_S = 10.0
#: Redis's answer to an XADD whose id is not above the stream's last: that frame is there.
_ALREADY_STORED = "equal or smaller than the target stream top item"
#: Seconds to connect, and to wait for one answer (a pipeline of frames is one answer).
_CONNECT_TIMEOUT_S = 5.0
_SOCKET_TIMEOUT_S = 10.0

#: What the writer stores: a frame (owner, sequence, frame), or a run to forget/quarantine.
_Item = tuple[LogOwner, int, bytes] | tuple[str, str]


def redis_options(
    url: str, *, password: str = "", ca_file: str = "", cert_file: str = "", key_file: str = ""
) -> dict[str, Any]:
    """redis-py's connection options for the store at ``url``: ``password`` (from the
    environment variable ``event_store_password_env`` names) when the URL carries none;
    with ``rediss://``, ``ca_file`` (``event_store_ca_file``), the CA the server's certificate
    must chain to, and ``cert_file`` and ``key_file``, the client certificate a server with
    ``tls-auth-clients`` asks for."""
    options: dict[str, Any] = {
        "socket_connect_timeout": _CONNECT_TIMEOUT_S,
        "socket_timeout": _SOCKET_TIMEOUT_S,
    }
    if password and urlsplit(url).password is None:
        options["password"] = password
    if ca_file:
        options["ssl_ca_certs"] = ca_file
    if cert_file:
        options["ssl_certfile"], options["ssl_keyfile"] = cert_file, key_file
    return options


class RedisEventStore:
    """Run logs on Redis (``redis://HOST:PORT/DB``, ``rediss://…``, ``unix:///path?db=N``).

    ``options`` are redis-py's (``redis_options``; no password is ever logged), ``client``
    the connection every part of the fleet shares, ``claims`` the fencing tokens frames are
    written with, ``lease`` the sidecar's membership, which its open takes first and a clean
    close leaves; its keys are the lease's (one deployment's prefix).
    """

    def __init__(
        self,
        url: str,
        options: dict[str, Any],
        client: redis.asyncio.Redis,
        claims: Claims,
        lease: Lease,
        *,
        retry_interval_s: float = RETRY_INTERVAL_S,
    ) -> None:
        self.url = url
        self.shown = redacted(url)
        self.retry_interval_s = retry_interval_s
        #: The error of the pipeline that failed, while the store cannot write.
        self.failure: str | None = None
        self._options = options
        self._listeners: list[StoreListener] = []
        self._pending: list[_Item] = []
        self._wake = asyncio.Event()
        self._stopping = False
        self._writer: asyncio.Task[None] | None = None
        self.client = client
        self.claims = claims
        self.lease = lease
        self.keys = lease.keys

    def open(self) -> list[StoredRun]:
        """The stored runs; ``ConfigError`` (one line) when Redis cannot be reached."""
        try:
            with redis.Redis.from_url(self.url, **self._options) as client:
                runs = self.lease.join(client)
        except RedisError as exc:
            raise ConfigError(
                f"event_store {self.shown} cannot be used as a run store "
                f"({type(exc).__name__}: {exc}): start Redis there, or fix the URL"
                + self._tls_hint()
            ) from None
        self._writer = asyncio.create_task(self._write_loop(), name="event-store")
        log.info(
            "event store opened", url=self.shown, runs=len(runs), sidecar=self.claims.sidecar_id
        )
        return runs

    def _tls_hint(self) -> str:
        """What a failed start over TLS may need: a CA, or a client certificate (or another)."""
        if not self.url.startswith("rediss://"):
            return ""
        if "ssl_certfile" in self._options:
            return (
                " or event_store_ca_file (the CA of the server's certificate), or "
                "event_store_cert_file and event_store_key_file (a client certificate the "
                "server's tls-ca-cert-file issued)"
            )
        return (
            " or event_store_ca_file (the CA of the server's certificate); a server that asks "
            "for client certificates (tls-auth-clients) needs event_store_cert_file and "
            "event_store_key_file"
        )

    shared = True

    def holds(self, run_id: str) -> bool:
        """While the lease is fresh by this sidecar's clock (nobody may adopt its runs yet)
        and the run is not parked (another sidecar may take a parked run at any moment)."""
        return self.lease.fresh() and run_id not in self.claims.parked

    def append(self, owner: LogOwner, sequence: int, frame: bytes) -> None:
        self._pending.append((owner, sequence, frame))
        self._wake.set()
        if self.failure is not None:  # kept to write once the store works; released now
            owner.release(sequence)

    def listen(self, listener: StoreListener) -> None:
        self._listeners.append(listener)

    def forget(self, run_id: str) -> None:
        self._pending.append((run_id, "forget"))
        self._wake.set()

    def quarantine(self, run_id: str) -> None:
        self._pending.append((run_id, "quarantine"))
        self._wake.set()

    async def close(self, *, clean: bool = True) -> None:
        """Write what is pending; then, ``clean`` (every run ended and is stored), leave the
        fleet; else drop the lease only, so that the fleet adopts the runs left live now."""
        self._stopping = True
        self._wake.set()
        if self._writer is not None:
            await self._writer
            if self.failure is None:
                await (self.lease.leave() if clean else self.lease.release())
        try:  # each connection's close is bounded by redis-py (socket_connect_timeout)
            await self.client.aclose()
        except RedisError as exc:  # a peer that does not close in time: we leave anyway
            log.warning("event store connections closed uncleanly", url=self.shown, error=str(exc))

    async def _write_loop(self) -> None:
        unwritten: list[_Item] = []  # the batch a failed pipeline left: it goes first, again
        while True:
            if unwritten and not self._stopping:
                # A failing store tries again once a retry interval, however often frames come.
                deadline = time.monotonic() + self.retry_interval_s
                while not self._stopping and (left := deadline - time.monotonic()) > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), left)
                    self._wake.clear()
            elif not self._pending and not self._stopping:
                await self._wake.wait()
            self._wake.clear()
            batch, self._pending = unwritten + self._pending, []
            if batch:
                try:
                    written = await self._commit(batch)
                except Exception as exc:  # any failed pipeline is a store failure, told
                    if not unwritten:
                        self._failed(f"{type(exc).__name__}: {exc}")
                    _release_all(_marks(batch))  # readers must not wait
                    unwritten = batch
                    if self._stopping:
                        log.error("event store closed unwritten", frames=len(batch))
                        return
                    continue
                if unwritten:
                    unwritten = []
                    self._recovered()
                _release_all(written)
            if self._stopping and not self._pending:
                return

    def _failed(self, error: str) -> None:
        """A pipeline failed: release what waits, then tell the listeners."""
        self.failure = error
        log.error(
            "event store failed: runs end, new runs are refused until it writes again",
            url=self.shown,
            error=error,
            retry_interval_s=self.retry_interval_s,
        )
        _release_all(_marks(self._pending))
        for listener in self._listeners:
            listener.health_changed(error)

    def _recovered(self) -> None:
        self.failure = None
        log.warning("event store writes again: runs are accepted", url=self.shown)
        for listener in self._listeners:
            listener.health_changed(None)

    async def _commit(self, batch: list[_Item], again: bool = True) -> list[tuple[LogOwner, int]]:
        """Send ``batch`` in one pipeline (in order, not atomic: each frame is its own
        fenced append, ``fencing.APPEND``); returns each owner with the last sequence
        written. A run whose frame the fence refused is another sidecar's now: its frames
        are not released, and the listeners are told (the manager stops the run here). A run
        whose keys are gone (``fencing.GONE``) is told as lost data (the manager fails it
        here); its frames are released unkept, those from then on without being sent.

        The script goes by its digest; a Redis without it (restarted, flushed) is sent it,
        and the batch again (what the first try wrote is refused as already stored)."""
        now, me, claims = time.time(), self.claims.sidecar_id, self.claims
        tokens, gone = claims.tokens, claims.gone
        appends: list[tuple[int, LogOwner, int]] = []  # (answer index, owner, sequence)
        unkept: dict[int, tuple[LogOwner, int]] = {}  # frames of runs whose keys are gone
        async with self.client.pipeline(transaction=False) as pipe:
            for item in batch:
                if len(item) == 2:
                    run_id, action = item
                    claims.drop(run_id)
                    if action == "forget":
                        pipe.delete(self.keys.log(run_id), self.keys.meta(run_id))
                        pipe.srem(self.keys.runs_of(me), run_id)
                    else:
                        pipe.rename(self.keys.log(run_id), self.keys.quarantine(run_id))
                        pipe.sadd(self.keys.quarantined, run_id)
                    pipe.zrem(self.keys.index, run_id)
                    continue
                owner, sequence, frame = item
                run_id = owner.run_id
                if gone and run_id in gone:
                    unkept[id(owner)] = (owner, sequence)
                    continue
                if sequence == 1:
                    tokens[run_id] = WRITTEN
                keys, token = (self.keys.log(run_id), self.keys.meta(run_id)), tokens.get(run_id, 0)
                appends.append((len(pipe), owner, sequence))
                if sequence == 1:
                    args = (sequence, frame, me, token, owner.owner, owner.resume_info)
                    pipe.evalsha(APPEND_SHA, 2, *keys, *args)
                    pipe.sadd(self.keys.runs_of(me), run_id)
                    pipe.zadd(self.keys.index, {run_id: now})
                else:
                    pipe.evalsha(APPEND_SHA, 2, *keys, sequence, frame, me, token)
            answers = await pipe.execute(raise_on_error=False)
        if again and any(isinstance(answer, NoScriptError) for answer in answers):
            await self.client.script_load(APPEND)
            return await self._commit(batch, again=False)
        for answer in answers:
            if isinstance(answer, ResponseError) and _ALREADY_STORED not in str(answer):
                if "no such key" in str(answer):  # quarantining a run with no stream left
                    continue
                raise answer
            if isinstance(answer, Exception) and not isinstance(answer, ResponseError):
                raise answer
        written: dict[int, tuple[LogOwner, int]] = unkept
        lost: dict[str, str] = {}
        vanished: set[str] = set()
        for index, owner, sequence in appends:
            if owner.run_id in lost:
                continue
            if owner.run_id in vanished or answers[index] == GONE:
                vanished.add(owner.run_id)
                unkept[id(owner)] = (owner, sequence)  # released unkept, as those after it
            elif (by := fenced_by(answers[index])) is not None:
                lost[owner.run_id] = by
            else:
                written[id(owner)] = (owner, sequence)
        for run_id, by in lost.items():
            if (message := claims.lost(run_id, by)) is not None:
                for listener in self._listeners:
                    listener.run_taken(run_id, message)
        for run_id in vanished:
            if (message := claims.vanished(run_id, self.shown)) is not None:
                for listener in self._listeners:
                    listener.log_lost(run_id, message)
        return list(written.values())


def _marks(batch: Iterable[_Item]) -> list[tuple[LogOwner, int]]:
    """Each owner in ``batch`` with the last sequence of its that ``batch`` holds."""
    released: dict[int, tuple[LogOwner, int]] = {}
    for item in batch:
        if len(item) == 3:
            owner, sequence, _ = item
            released[id(owner)] = (owner, sequence)
    return list(released.values())


def _release_all(marks: Iterable[tuple[LogOwner, int]]) -> None:
    for owner, sequence in marks:
        owner.release(sequence)
