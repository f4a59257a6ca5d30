"""A sidecar's membership of the fleet: its lease, the adoption of dead sidecars' runs, and its
control stream.

Each sidecar has an id (``sidecar_id``, or a random one per start) and a *lease*: a key with a
time to live (``event_store_lease_s``) that it renews three times a lease. A run's hash names
the sidecar that runs it, so a run's lease is its sidecar's: held while that key lives. A
renewal that fails is logged and counted (``renewal_failures``); the lease keeps trying.

At start-up (``join``) a sidecar takes back its own live runs and those of sidecars whose
leases expired, claiming each (a new fencing token, ``fencing``) before it reads its log.
While it runs (``running``), when another sidecar's lease expires (it died, or lost Redis for
a whole lease), one sidecar takes its adopter key (``SET NX``) and *adopts* its live runs the
same way; the ``FleetRuns`` it reports to takes them back as a restart does: they resume from
their logs where they can, else end with ``run_failed`` (exactly once: only the adopter writes
it). A sidecar that finds its lease expired (it stalled) checks its runs, and reports each one
another sidecar claimed; each renewal also checks its parked runs, which another sidecar may
have taken over (a hand-over). Cancels and approval decisions for this sidecar's runs come on
its *control stream*, and are reported too.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator
from typing import Any, cast

import redis
import redis.asyncio
import structlog
from redis.exceptions import RedisError

from cleveragents.sidecar.fleet.control import Control
from cleveragents.sidecar.fleet.directory import FleetRuns
from cleveragents.sidecar.fleet.fencing import CLAIM, Claims
from cleveragents.sidecar.fleet.layout import (
    Keys,
    ended,
    read_stored,
    stored_runs,
)
from cleveragents.sidecar.runs.store import StoredRun

__all__ = ["Lease"]

log = structlog.get_logger("cleveragents.sidecar.store")

#: While the lease was renewed within this share of it, it surely holds: nobody may adopt this
#: sidecar's runs before it expires, at least a lease after the renewal was sent. Renewals
#: come every third of a lease.
FRESH_SHARE = 0.5
#: How long one blocking read of the control stream waits (milliseconds).
_CONTROL_BLOCK_MS = 1000
#: What XREAD answers (per stream).
_Streams = list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]]


class Lease:
    """This sidecar's lease, its adoption of expired ones, and its control stream, among the
    keys ``keys`` names (the fleet of one deployment)."""

    def __init__(
        self, client: redis.asyncio.Redis, claims: Claims, lease_s: float, keys: Keys
    ) -> None:
        self.client = client
        self.claims = claims
        #: The names of this deployment's keys (its ``event_store_key_prefix``).
        self.keys = keys
        self.lease_s = lease_s
        #: Lease renewals that failed (Redis unreachable, or the lease had expired).
        self.renewal_failures = 0
        #: Runs adopted from sidecars whose leases expired.
        self.adopted_runs = 0
        #: Set when the lease stops: its loops end at their next turn even if a cancel is lost.
        self._closing = asyncio.Event()
        #: When (this sidecar's monotonic clock) the renewal that holds the lease now was sent:
        #: the lease lasts at least ``lease_s`` from then (see ``fresh``).
        self._renewed_at = -math.inf

    @property
    def sidecar_id(self) -> str:
        return self.claims.sidecar_id

    @property
    def lease_ms(self) -> int:
        return max(1, int(self.lease_s * 1000))

    # -- at start-up (the store's synchronous open) ------------------------------------------

    def join(self, client: redis.Redis) -> list[StoredRun]:
        """Take this sidecar's lease, and return the runs it keeps: every finished one, and
        the live ones that are its own (same ``sidecar_id``) or whose sidecar's lease expired
        (adopted); another live sidecar's runs stay its own. Each live one is claimed (a new
        fencing token) and then read again: its log as the claim found it."""
        me = self.sidecar_id
        alive = self._register(client)
        adopted: dict[str, bool] = {}  # a dead sidecar's id: whether this one adopts its runs
        runs, wanted = [], []
        for stored, sidecar in stored_runs(client, self.keys):
            if ended(stored.frames):
                runs.append(stored)
                continue
            if sidecar != me and sidecar:
                if sidecar in alive:
                    continue  # another sidecar runs it now
                if sidecar not in adopted:
                    key, px = self.keys.adopter(sidecar), 3 * self.lease_ms
                    adopted[sidecar] = bool(client.set(key, me, px=px, nx=True))
                if not adopted[sidecar]:
                    continue
            wanted.append((stored.run_id, sidecar))
        with client.pipeline(transaction=False) as pipe:
            for run_id, sidecar in wanted:
                pipe.eval(CLAIM, 1, self.keys.meta(run_id), me, sidecar)
            claimed = self._claimed([run_id for run_id, _ in wanted], pipe.execute())
        if claimed:
            client.sadd(self.keys.runs_of(me), *claimed)
        runs += [stored for stored, _ in stored_runs(client, self.keys, claimed)]
        for sidecar in (sidecar for sidecar, won in adopted.items() if won):
            client.srem(self.keys.sidecars, sidecar)
            client.delete(self.keys.runs_of(sidecar), self.keys.control(sidecar))
        return runs

    def _register(self, client: redis.Redis) -> set[str]:
        """Take this sidecar's lease; return the ids of the other sidecars whose leases live."""
        asked = time.monotonic()
        client.set(self.keys.lease(self.sidecar_id), "1", px=self.lease_ms)
        self._renewed_at = asked
        client.sadd(self.keys.sidecars, self.sidecar_id)
        others = [m.decode() for m in cast("set[bytes]", client.smembers(self.keys.sidecars))]
        others = [other for other in others if other != self.sidecar_id]
        with client.pipeline(transaction=False) as pipe:
            for other in others:
                pipe.exists(self.keys.lease(other))
            alive = pipe.execute()
        return {other for other, live in zip(others, alive, strict=True) if live}

    def _claimed(self, run_ids: list[str], tokens: list[Any]) -> list[str]:
        """The runs of ``run_ids`` whose claims (``tokens``, in order) succeeded, kept."""
        claimed = []
        for run_id, token in zip(run_ids, tokens, strict=True):
            if token:
                self.claims.hold(run_id, int(token))
                claimed.append(run_id)
        return claimed

    # -- while the sidecar runs ------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self, runs: FleetRuns) -> AsyncIterator[None]:
        """Renew the lease, adopt expired ones and read the control stream, reporting to
        ``runs``, until the block ends.

        The loops are cancelled, and told to end too: redis-py can lose the cancel of a
        command (it writes under Python 3.11's ``asyncio.wait_for``, which drops a cancel
        that comes as the write ends); the ``XREAD`` then returns as if nothing happened,
        and a loop that relied on the cancel read on, so the stop never returned. Told, a
        loop ends once its read returns: within ``_CONTROL_BLOCK_MS``."""
        self._closing.clear()
        tasks = [
            asyncio.create_task(self._heartbeat(runs), name="store-lease"),
            asyncio.create_task(self._control_loop(runs), name="store-control"),
        ]
        try:
            yield
        finally:
            self._closing.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def leave(self) -> None:
        """Leave the fleet, lease and all (every run of this sidecar ended and is stored)."""
        self._closing.set()
        me = self.sidecar_id
        with contextlib.suppress(RedisError):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.srem(self.keys.sidecars, me)
                pipe.delete(self.keys.lease(me), self.keys.runs_of(me), self.keys.control(me))
                await pipe.execute()

    async def release(self) -> None:
        """Let the lease go at once, its runs left live (a failed start): the other sidecars
        adopt them at their next renewal, not a lease later."""
        self._closing.set()
        with contextlib.suppress(RedisError):
            await self.client.delete(self.keys.lease(self.sidecar_id))

    def fresh(self) -> bool:
        """Whether the lease surely holds, by this sidecar's own clock: renewed (without
        expiring first) within ``FRESH_SHARE`` of a lease. A sidecar that stalled (``SIGSTOP``,
        a long pause) finds it stale on waking, before its next renewal tells it what it lost;
        a run's tool calls then wait for their starts to be stored (a fenced write)."""
        return time.monotonic() - self._renewed_at < self.lease_s * FRESH_SHARE

    def counts(self) -> tuple[int, int, int]:
        """Lease renewals that failed, runs adopted, runs taken over by others (metrics)."""
        return self.renewal_failures, self.adopted_runs, self.claims.lost_runs

    async def _heartbeat(self, runs: FleetRuns) -> None:
        while not self._closing.is_set():
            with contextlib.suppress(TimeoutError):  # the renewal period, or the close
                await asyncio.wait_for(self._closing.wait(), self.lease_s / 3)
            if not self._closing.is_set() and await self.renew(runs):
                with contextlib.suppress(RedisError):
                    await self._check(runs, sorted(self.claims.parked))
                    await self._adopt_expired(runs)

    async def renew(self, runs: FleetRuns | None = None) -> bool:
        """Renew this sidecar's lease; ``False`` (logged, counted) if Redis did not take it.
        A lease that had expired is taken again, and ``runs`` told of each run another
        sidecar claimed meanwhile."""
        me = self.sidecar_id
        try:
            asked = time.monotonic()
            renewed = await self.client.set(self.keys.lease(me), "1", px=self.lease_ms, xx=True)
            if renewed:
                self._renewed_at = asked
            else:  # it expired first: other sidecars may have adopted our runs
                self.renewal_failures += 1
                log.error(
                    "store lease had expired (or vanished from the store) before its "
                    "renewal; taken again",
                    sidecar=me,
                    lease_s=self.lease_s,
                )
                asked = time.monotonic()
                await self.client.set(self.keys.lease(me), "1", px=self.lease_ms)
                await self.client.sadd(self.keys.sidecars, me)  # an adopter removed it
                if runs is not None:
                    await self._check(runs, list(self.claims.tokens))
                    # Fresh again only now: the runs others claimed meanwhile are lost here.
                    self._renewed_at = asked
            return True
        except RedisError as exc:
            self.renewal_failures += 1
            log.warning(
                "store lease renewal failed",
                sidecar=me,
                error=f"{type(exc).__name__}: {exc}",
                failures=self.renewal_failures,
            )
            return False

    async def _check(self, runs: FleetRuns, run_ids: list[str]) -> None:
        """Tell ``runs`` of each run of ``run_ids`` that another sidecar claimed."""
        if not run_ids:
            return
        async with self.client.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hmget(self.keys.meta(run_id), ["sidecar", "epoch"])
            answers = await pipe.execute()
        for run_id, (sidecar, epoch) in zip(run_ids, answers, strict=True):
            token = self.claims.tokens.get(run_id)  # none: forgotten while this read was on
            if sidecar is None or token is None:  # or its first frame is not written yet
                continue
            holder = sidecar.decode()
            if holder == self.sidecar_id and int(epoch or 0) == token:
                continue
            if (message := self.claims.lost(run_id, holder)) is not None:
                runs.lose(run_id, message)

    async def _adopt_expired(self, runs: FleetRuns) -> None:
        """Adopt the live runs of each sidecar whose lease expired (one adopter each)."""
        me = self.sidecar_id
        members = cast("set[bytes]", await self.client.smembers(self.keys.sidecars))
        for other in sorted(m.decode() for m in members):
            if other == me or await self.client.exists(self.keys.lease(other)):
                continue
            if not await self.client.set(
                self.keys.adopter(other), me, px=3 * self.lease_ms, nx=True
            ):
                continue
            run_ids = cast("set[bytes]", await self.client.smembers(self.keys.runs_of(other)))
            found = await read_stored(self.client, self.keys, sorted(m.decode() for m in run_ids))
            # Only what the dead sidecar still ran: an id it once ran may be another's now.
            live = [
                held.stored.run_id
                for held in found
                if held.sidecar == other and not ended(held.stored.frames)
            ]
            async with self.client.pipeline(transaction=False) as pipe:
                for run_id in live:
                    pipe.eval(CLAIM, 1, self.keys.meta(run_id), me, other)
                claimed = self._claimed(live, await pipe.execute())
            if claimed:
                await self.client.sadd(self.keys.runs_of(me), *claimed)
            stored = await self.claimed_logs(claimed)
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.delete(self.keys.runs_of(other), self.keys.control(other))
                pipe.srem(self.keys.sidecars, other)
                await pipe.execute()
            self.adopted_runs += len(stored)
            log.warning(
                "adopted the live runs of a sidecar whose store lease expired",
                sidecar=other,
                runs=len(stored),
            )
            if stored:
                await runs.adopt(stored)

    async def claimed_logs(self, run_ids: list[str]) -> list[StoredRun]:
        """The logs of the live runs ``run_ids`` this sidecar claimed, read after the claim:
        a frame the old owner wrote is in them, and it can write none after the claim."""
        found = await read_stored(self.client, self.keys, run_ids)
        return [held.stored for held in found if not ended(held.stored.frames)]

    async def _control_loop(self, runs: FleetRuns) -> None:
        key, last = self.keys.control(self.sidecar_id), "0-0"
        while not self._closing.is_set():
            try:
                read = self.client.xread({key: last}, block=_CONTROL_BLOCK_MS, count=100)
                answer = cast("_Streams", await read)
            except RedisError:  # Redis is away: the store's own failure is told
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), 1.0)
                continue
            for _, entries in answer or ():
                for entry_id, fields in entries:
                    last = entry_id.decode()  # read past, whatever it holds
                    try:
                        control = Control.of(fields)
                    except ValueError as exc:  # written by something else: not for us to obey
                        log.warning("control entry skipped", entry=last, error=str(exc))
                        continue
                    try:
                        await runs.obey(control)
                    except Exception:  # one bad request must not stop the stream's reading
                        log.exception("control request failed", op=control.op, run=control.run_id)
