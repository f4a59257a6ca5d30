"""A sidecar's place in a fleet that shares one Redis: its lease, the others' runs, control.

Each sidecar has an id (``sidecar_id``, or a random one per start) and a *lease*: a key with a
time to live (``event_store_lease_s``) that it renews three times a lease. A run's hash names
the sidecar that runs it, so a run's lease is its sidecar's: held while that key lives. A
renewal that fails is logged and counted (``renewal_failures``); the store keeps trying.

When a sidecar's lease expires (it died, or lost Redis for a whole lease), one other sidecar
takes its adopter key (``SET NX``) and *adopts* its live runs: it claims each (a new fencing
token, ``redis_fence.py``) before it reads its log, ``on_adopt`` gets the logs, and the run
manager takes them back as a restart does: they resume from their logs where they can, else
end with ``run_failed`` (exactly once: only the adopter writes it). A sidecar that finds its
lease expired (it stalled) checks its runs: ``on_lost`` is told each one another sidecar
claimed, as the store is told of a frame the fence refused, and the manager stops it here.

Other sidecars read this one's runs from the streams (``SharedLog``), and send it cancels
and approval decisions on its *control stream*, which ``on_control`` gets; hand-overs of
parked Session runs go there too (``redis_handover``).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from typing import Any, cast

import redis
import redis.asyncio
import structlog
from redis.exceptions import RedisError

from cleveragents.sidecar.fleet.fencing import CLAIM, taken_over_message
from cleveragents.sidecar.fleet.handover import RedisHandovers
from cleveragents.sidecar.fleet.keys import (
    INDEX_KEY,
    SIDECARS_KEY,
    adopter_key,
    control_key,
    lease_key,
    log_key,
    meta_key,
    runs_of_key,
)
from cleveragents.sidecar.fleet.mirrors import Control, SharedHead, SharedRun
from cleveragents.sidecar.identity import DEFAULT_IDENTITY
from cleveragents.sidecar.runs.store import StoredRun
from cleveragents.tool import RunCancelled, RunCompleted, RunFailed
from cleveragents.wire import decode_frame

__all__ = ["RedisFleet", "ended", "frames_of"]

log = structlog.get_logger("cleveragents.sidecar.store")

#: How long one blocking read of the control stream waits (milliseconds).
_CONTROL_BLOCK_MS = 1000
#: What XRANGE answers, and XREAD (per stream).
_Entries = list[tuple[bytes, dict[bytes, bytes]]]
_Streams = list[tuple[bytes, _Entries]]
#: The control stream keeps about this many entries.
_CONTROL_MAXLEN = 10_000


class RedisFleet:
    """This sidecar's lease, adoption of expired ones, control streams, and shared reads."""

    def __init__(self, client: redis.asyncio.Redis, lease_s: float, sidecar_id: str = "") -> None:
        self.client = client
        self.lease_s = lease_s
        self.sidecar_id = sidecar_id or uuid.uuid4().hex[:16]
        #: Told the logs of the live runs this sidecar adopted (the run manager ends them).
        self.on_adopt: Callable[[list[StoredRun]], object] | None = None
        #: Told each control request other sidecars sent for this sidecar's runs.
        self.on_control: Callable[[Control], None] | None = None
        #: Told each live run another sidecar took over, and why (the manager stops it).
        self.on_lost: Callable[[str, str], None] | None = None
        #: The fencing token this sidecar claimed each of its runs with (``redis_fence``).
        self.tokens: dict[str, int] = {}
        #: Lease renewals that failed (Redis unreachable, or the lease had expired).
        self.renewal_failures = 0
        #: Runs adopted from sidecars whose leases expired; runs lost to other sidecars.
        self.adopted_runs = 0
        self.lost_runs = 0
        self._tasks: list[asyncio.Task[None]] = []
        #: Parked Session runs handed over between sidecars (``redis_handover``).
        self.handovers = RedisHandovers(self)
        #: Set by ``close``: the loops end at their next turn even if a cancel is lost.
        self._closing = asyncio.Event()

    def counts(self) -> tuple[int, int, int]:
        """Lease renewals that failed, runs adopted, runs taken over by others (metrics)."""
        return self.renewal_failures, self.adopted_runs, self.lost_runs

    @property
    def lease_ms(self) -> int:
        return max(1, int(self.lease_s * 1000))

    # -- at start-up (the store's synchronous open) ------------------------------------------

    def register(self, client: redis.Redis) -> set[str]:
        """Take this sidecar's lease; return the ids of the other sidecars whose leases live."""
        client.set(lease_key(self.sidecar_id), "1", px=self.lease_ms)
        client.sadd(SIDECARS_KEY, self.sidecar_id)
        seconds, micros = client.time()
        self.handovers.started_ms = seconds * 1000 + micros // 1000  # Redis's clock
        others = [m.decode() for m in cast("set[bytes]", client.smembers(SIDECARS_KEY))]
        others = [other for other in others if other != self.sidecar_id]
        with client.pipeline(transaction=False) as pipe:
            for other in others:
                pipe.exists(lease_key(other))
            alive = pipe.execute()
        return {other for other, live in zip(others, alive, strict=True) if live}

    def claim_sync(self, client: redis.Redis, runs: list[tuple[str, str]]) -> list[str]:
        """Make the runs ``runs`` (id, the sidecar that ran it), taken back at start-up, this
        sidecar's; returns the ids claimed (not those another sidecar claimed first)."""
        with client.pipeline(transaction=False) as pipe:
            for run_id, sidecar in runs:
                pipe.eval(CLAIM, 1, meta_key(run_id), self.sidecar_id, sidecar)
            tokens = pipe.execute()
        return self._claimed(client, [run for run, _ in runs], tokens)

    def _claimed(self, client: redis.Redis, run_ids: list[str], tokens: list[Any]) -> list[str]:
        claimed = [run_id for run_id, token in zip(run_ids, tokens, strict=True) if token]
        self.tokens.update((r, int(t)) for r, t in zip(run_ids, tokens, strict=True) if t)
        if claimed:
            client.sadd(runs_of_key(self.sidecar_id), *claimed)
        return claimed

    def start(self) -> None:
        """Start renewing the lease and reading the control stream (``close`` stops both)."""
        self._tasks = [
            asyncio.create_task(self._heartbeat(), name="store-lease"),
            asyncio.create_task(self._control_loop(), name="store-control"),
        ]

    async def close(self, *, clean: bool) -> None:
        """Stop; ``clean`` (every run ended and stored): leave the fleet, lease and all.

        The loops are cancelled, and told to end too: redis-py can lose the cancel of a
        command (it writes under Python 3.11's ``asyncio.wait_for``, which drops a cancel
        that comes as the write ends); the ``XREAD`` then returns as if nothing happened,
        and a loop that relied on the cancel read on, so the stop never returned. Told, a
        loop ends once its read returns: within ``_CONTROL_BLOCK_MS``."""
        self._closing.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if clean:
            with contextlib.suppress(RedisError):
                async with self.client.pipeline(transaction=False) as pipe:
                    pipe.srem(SIDECARS_KEY, self.sidecar_id)
                    pipe.delete(
                        lease_key(self.sidecar_id),
                        runs_of_key(self.sidecar_id),
                        control_key(self.sidecar_id),
                    )
                    await pipe.execute()

    # -- SharedLog -----------------------------------------------------------------------------

    async def read_runs(self, run_ids: list[str]) -> list[SharedRun]:
        if not run_ids:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.xrange(log_key(run_id))
                pipe.hmget(meta_key(run_id), ["owner", "sidecar", "resume"])
            answers = await pipe.execute()
        found = []
        for index, run_id in enumerate(run_ids):
            frames = frames_of(answers[2 * index])
            if frames:
                owner, sidecar, resume = answers[2 * index + 1]
                name = owner.decode() if owner else DEFAULT_IDENTITY.name
                stored = StoredRun(run_id, frames, name, resume.decode() if resume else "")
                found.append(SharedRun(stored, sidecar.decode() if sidecar else ""))
        return found

    async def read_head(self, run_id: str) -> SharedHead | None:
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.exists(log_key(run_id))
            pipe.hmget(meta_key(run_id), ["owner", "sidecar", "resume"])
            exists, (owner, sidecar, resume) = await pipe.execute()
        if not exists:
            return None
        name = owner.decode() if owner else DEFAULT_IDENTITY.name
        return SharedHead(name, (sidecar or b"").decode(), (resume or b"").decode())

    async def recent_run_ids(self, limit: int) -> list[str]:
        members = await self.client.zrevrange(INDEX_KEY, 0, max(0, limit - 1))
        return [member.decode() for member in cast("list[bytes]", members)]

    async def read_after(self, run_id: str, after: int, block_ms: int) -> list[bytes]:
        streams = {log_key(run_id): f"{after}-0"}
        answer = cast("_Streams", await self.client.xread(streams, block=block_ms))  # type: ignore[arg-type]
        frames: list[bytes] = []
        for _, entries in answer or ():
            for entry_id, fields in entries:
                if int(entry_id.split(b"-", 1)[0]) != after + len(frames) + 1:
                    return frames  # a gap: read again from the last in order
                frames.append(fields[b"f"])
        return frames

    async def send_control(self, sidecar: str, control: Control) -> None:
        fields: dict[Any, Any] = {
            "op": control.op,
            "run": control.run_id,
            "reason": control.reason,
            "call": control.call_id,
            "approved": "1" if control.approved else "",
            "identity": control.identity,
            "from": self.sidecar_id,
            "token": str(control.token),
        }
        await self.client.xadd(
            control_key(sidecar), fields, maxlen=_CONTROL_MAXLEN, approximate=True
        )

    # -- the background tasks --------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        while not self._closing.is_set():
            with contextlib.suppress(TimeoutError):  # the renewal period, or the close
                await asyncio.wait_for(self._closing.wait(), self.lease_s / 3)
            if not self._closing.is_set() and await self.renew():
                with contextlib.suppress(RedisError):
                    await self._adopt_expired()

    async def renew(self) -> bool:
        """Renew this sidecar's lease; ``False`` (logged, counted) if Redis did not take it."""
        try:
            renewed = await self.client.set(
                lease_key(self.sidecar_id), "1", px=self.lease_ms, xx=True
            )
            if not renewed:  # it expired first: other sidecars may have adopted our runs
                self.renewal_failures += 1
                log.error(
                    "store lease had expired before its renewal; taken again",
                    sidecar=self.sidecar_id,
                    lease_s=self.lease_s,
                )
                await self.client.set(lease_key(self.sidecar_id), "1", px=self.lease_ms)
                await self.client.sadd(SIDECARS_KEY, self.sidecar_id)  # an adopter removed it
                await self._check_claims()
            return True
        except RedisError as exc:
            self.renewal_failures += 1
            log.warning(
                "store lease renewal failed",
                sidecar=self.sidecar_id,
                error=f"{type(exc).__name__}: {exc}",
                failures=self.renewal_failures,
            )
            return False

    async def _check_claims(self) -> None:
        """Find the runs another sidecar claimed while this one's lease was expired."""
        run_ids = list(self.tokens)
        async with self.client.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hmget(meta_key(run_id), ["sidecar", "epoch"])
            answers = await pipe.execute()
        for run_id, (sidecar, epoch) in zip(run_ids, answers, strict=True):
            token = self.tokens.get(run_id)  # none: forgotten while this read was under way
            if sidecar is None or token is None:  # or its first frame is not written yet
                continue
            if sidecar.decode() != self.sidecar_id or int(epoch or 0) != token:
                self.lose(run_id, sidecar.decode())

    def lose(self, run_id: str, sidecar: str) -> None:
        """Another sidecar (``sidecar``) claimed ``run_id``: tell ``on_lost`` (once)."""
        if self.tokens.pop(run_id, None) is None:
            return
        self.lost_runs += 1
        message = taken_over_message(run_id, self.sidecar_id, sidecar)
        log.error("store lease lost: a run was taken over", run_id=run_id, by=sidecar)
        if self.on_lost is not None:
            self.on_lost(run_id, message)

    async def _adopt_expired(self) -> None:
        """Adopt the live runs of each sidecar whose lease expired (one adopter each)."""
        members = cast("set[bytes]", await self.client.smembers(SIDECARS_KEY))
        for other in sorted(m.decode() for m in members):
            if other == self.sidecar_id or await self.client.exists(lease_key(other)):
                continue
            taken = await self.client.set(
                adopter_key(other), self.sidecar_id, px=3 * self.lease_ms, nx=True
            )
            if not taken:
                continue
            runs = cast("set[bytes]", await self.client.smembers(runs_of_key(other)))
            found = await self.read_runs(sorted(m.decode() for m in runs))
            # Only what the dead sidecar still ran: an id it once ran may be another's now.
            run_ids = [
                f.stored.run_id for f in found if f.sidecar == other and not ended(f.stored.frames)
            ]
            live = await self._claim(run_ids, other)
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.delete(runs_of_key(other), control_key(other))
                pipe.srem(SIDECARS_KEY, other)
                await pipe.execute()
            self.adopted_runs += len(live)
            log.warning(
                "adopted the live runs of a sidecar whose store lease expired",
                sidecar=other,
                runs=len(live),
            )
            if live and self.on_adopt is not None:
                self.on_adopt(live)

    async def _claim(self, run_ids: list[str], sidecar: str) -> list[StoredRun]:
        """Claim the runs ``run_ids`` of ``sidecar``, then read their logs: a frame the old
        owner wrote is in them, and it can write none after the claim."""
        async with self.client.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.eval(CLAIM, 1, meta_key(run_id), self.sidecar_id, sidecar)
            tokens = await pipe.execute()
        claimed = [run_id for run_id, token in zip(run_ids, tokens, strict=True) if token]
        self.tokens.update((r, int(t)) for r, t in zip(run_ids, tokens, strict=True) if t)
        if claimed:
            await self.client.sadd(runs_of_key(self.sidecar_id), *claimed)
        return await self.claimed_logs(claimed)

    async def claimed_logs(self, run_ids: list[str]) -> list[StoredRun]:
        """The logs of the live runs ``run_ids`` this sidecar claimed, read after the claim."""
        return [f.stored for f in await self.read_runs(run_ids) if not ended(f.stored.frames)]

    async def ask_release(self, sidecar: str, run_id: str, identity: str) -> Control | None:
        return await self.handovers.ask(sidecar, run_id, identity)

    async def _control_loop(self) -> None:
        key, last = control_key(self.sidecar_id), "0-0"
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
                    last = entry_id.decode()
                    await self._obey(_control(fields), int(entry_id.split(b"-", 1)[0]))

    async def _obey(self, control: Control, sent_ms: int) -> None:
        """Hand ``control`` to the hand-overs or ``on_control`` (one at a time, in order)."""
        try:
            if not await self.handovers.handle(control, sent_ms) and self.on_control is not None:
                self.on_control(control)
        except RedisError as exc:  # the asker's wait ends unanswered; it retries
            log.error(
                "control request failed", op=control.op, run_id=control.run_id, error=repr(exc)
            )


def _control(fields: dict[bytes, bytes]) -> Control:
    def text(name: bytes) -> str:
        return fields.get(name, b"").decode()

    return Control(
        text(b"op"), text(b"run"), text(b"reason"), text(b"call"), bool(fields.get(b"approved")),
        text(b"identity"), text(b"from"), int(text(b"token") or 0),
    )  # fmt: skip


def ended(frames: list[bytes]) -> bool:
    """Whether a log ends with its terminal event."""
    return isinstance(decode_frame(frames[-1]).event, RunCompleted | RunFailed | RunCancelled)


def frames_of(entries: _Entries) -> list[bytes]:
    """The gap-free frames of a stream's entries (``<seq>-0`` ids), from sequence 1 on."""
    frames: list[bytes] = []
    for entry_id, fields in entries:
        if int(entry_id.split(b"-", 1)[0]) != len(frames) + 1:
            break  # a gap can only follow a torn pipeline: stop there
        frames.append(fields[b"f"])
    return frames
