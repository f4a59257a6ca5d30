"""``RedisFleet``: the other sidecars sharing this one's Redis, as the run directory asks them.

It reads their runs (the mirrors follow them), sends them cancels and approval decisions on
their control streams, checks whether a run this sidecar has is still its own (a lost
ownership names the sidecar that has it now), and hands a parked Session run over to the
sidecar its client re-attached to.

**The hand-over** is one compare-and-set on the run's hash (``fencing.TAKE``): the run is
taken if it is parked, for the identity that owns it, with a new fencing token, whichever
sidecar holds it; then its log is read (after the claim: its old holder can write nothing
more) and the run is taken back as an adoption takes one. The old holder is not asked: it
is told (a ``taken`` notice on its control stream, which it checks against the hash), and
finds out anyway when its next frame is fenced, at its next lease renewal (it checks its
parked runs), or when a client re-attaches there; it stops its copy then (``Run.lose``). A run
attached to a stream is not parked: it is refused (``FAILED_PRECONDITION``, naming its
sidecar); a run whose sidecar's lease expired waits for its adoption (``UNAVAILABLE``). A run
the store names this sidecar for though it lacks it (a take whose sidecar failed before it
took the run back) is taken the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar, cast

import grpc
import redis.asyncio
import structlog
from redis.exceptions import RedisError

from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.fleet.control import TAKEN, Control
from cleveragents.sidecar.fleet.directory import FleetRuns, Handover
from cleveragents.sidecar.fleet.fencing import HOLD, PARK, TAKE, Claims, gone_message
from cleveragents.sidecar.fleet.layout import (
    read_stored,
)
from cleveragents.sidecar.fleet.lease import Lease
from cleveragents.sidecar.fleet.mirrors import HeldRun, Mirrors, RunHead
from cleveragents.sidecar.identity import DEFAULT_IDENTITY
from cleveragents.sidecar.runs import LogStats, Run
from cleveragents.sidecar.runs.store import EventStore, StoredRun

__all__ = ["RedisFleet"]

log = structlog.get_logger("cleveragents.sidecar.fleet")

T = TypeVar("T")
#: What XREAD answers (per stream).
_Streams = list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]]
#: The control stream keeps about this many entries.
_CONTROL_MAXLEN = 10_000


class RedisFleet:
    """This sidecar's view of the others on one Redis: ``claims`` holds its fencing tokens,
    ``lease`` its membership; the mirrors of their runs keep ``stats`` and ``frame_limit``;
    ``shown`` is the store's URL without its password."""

    def __init__(
        self,
        client: redis.asyncio.Redis,
        claims: Claims,
        lease: Lease,
        stats: LogStats,
        frame_limit: int = 0,
        shown: str = "",
    ) -> None:
        #: The store's URL as logs and messages show it (no password).
        self.shown = shown
        self.client = client
        self.claims = claims
        self.lease = lease
        self.keys = lease.keys
        self.mirrors = Mirrors(self, stats, frame_limit, shown)

    @property
    def sidecar_id(self) -> str:
        return self.claims.sidecar_id

    # -- reading the others' runs (``mirrors.FleetLog``) -------------------------------------

    async def read_runs(self, run_ids: list[str]) -> list[HeldRun]:
        return await read_stored(self.client, self.keys, run_ids)

    async def read_head(self, run_id: str) -> RunHead | None:
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.exists(self.keys.log(run_id))
            pipe.hmget(self.keys.meta(run_id), ["owner", "sidecar", "resume"])
            exists, (owner, sidecar, resume) = await pipe.execute()
        if not exists:
            return None
        name = owner.decode() if owner else DEFAULT_IDENTITY.name
        return RunHead(name, (sidecar or b"").decode(), (resume or b"").decode())

    async def recent_run_ids(self, limit: int) -> list[str]:
        members = await self.client.zrevrange(self.keys.index, 0, max(0, limit - 1))
        return [member.decode() for member in cast("list[bytes]", members)]

    async def read_after(self, run_id: str, after: int, block_ms: int) -> list[bytes]:
        streams = {self.keys.log(run_id): f"{after}-0"}
        answer = cast("_Streams", await self.client.xread(streams, block=block_ms))  # type: ignore[arg-type]
        frames: list[bytes] = []
        for _, entries in answer or ():
            for entry_id, fields in entries:
                if int(entry_id.split(b"-", 1)[0]) != after + len(frames) + 1:
                    return frames  # a gap: read again from the last in order
                frames.append(fields[b"f"])
        return frames

    # -- what the run directory asks (``directory.Fleet``) -----------------------------------

    @contextlib.asynccontextmanager
    async def running(self, runs: FleetRuns) -> AsyncIterator[None]:
        """The lease's loops reporting to ``runs``, and the mirrors followed, until the end."""
        try:
            async with self.lease.running(runs):
                yield
        finally:
            await self.mirrors.close()

    async def mirror(self, run_id: str, may: Callable[[str], bool]) -> tuple[Run, str] | None:
        return await self.mirrors.get(run_id, may)

    async def recent(self, limit: int, skip: set[str]) -> list[tuple[Run, str]]:
        return await self.mirrors.recent(limit, skip)

    async def reserve(self, run_id: str, owner: str, store: EventStore) -> None:
        await self.mirrors.reserve(run_id, owner, store)

    async def verify(self, run_id: str) -> str | None:
        """``None`` while the store says this sidecar runs ``run_id`` (or cannot say); else
        its copy here is stale (its lease expired while it stalled, and another sidecar took
        the run over): the message of its loss, naming the sidecar that has it now."""
        try:
            head = await self.read_head(run_id)
        except RedisError:
            return None
        if head is None or head.sidecar in ("", self.sidecar_id):
            return None
        return self.claims.lost(run_id, head.sidecar)

    async def send(self, sidecar: str, control: Control) -> None:
        """Queue ``control`` on the control stream of ``sidecar``."""
        fields = control.fields(self.sidecar_id)
        await _store(
            self.client.xadd(
                self.keys.control(sidecar), fields, maxlen=_CONTROL_MAXLEN, approximate=True
            )
        )

    async def take(self, run_id: str, identity: str) -> Handover:
        """Take the parked run ``run_id`` of ``identity`` over (the compare-and-set). A run
        this sidecar holds a token for is being taken back here already (an adoption under
        way): it is not taken twice."""
        me = self.sidecar_id
        if run_id in self.claims.tokens:
            return Handover(False, me, alive=True)
        answer = await _store(
            self.client.eval(TAKE, 1, self.keys.meta(run_id), me, identity, DEFAULT_IDENTITY.name)
        )
        token, holder = int(answer[0]), _text(answer[1])
        if not token:
            alive = bool(holder) and bool(await _store(self.client.exists(self.keys.lease(holder))))
            return Handover(False, holder, alive=alive)
        self.claims.hold(run_id, token)
        stored = await _store(self._moved(run_id, holder))
        if stored is None:  # it had ended there: nothing to write
            self.claims.drop(run_id)
        if holder and holder != self.sidecar_id:  # it stops its copy now, not at its renewal
            with contextlib.suppress(SidecarError):
                await self.send(holder, Control(TAKEN, run_id))
        log.info("run taken over", run_id=run_id, by=me, holder=holder, live=stored is not None)
        return Handover(True, holder, stored)

    async def _moved(self, run_id: str, holder: str) -> StoredRun | None:
        """Move ``run_id`` from ``holder``'s runs to this sidecar's; its log after the claim."""
        async with self.client.pipeline(transaction=False) as pipe:
            if holder and holder != self.sidecar_id:
                pipe.srem(self.keys.runs_of(holder), run_id)
            pipe.sadd(self.keys.runs_of(self.sidecar_id), run_id)
            await pipe.execute()
        stored = await self.lease.claimed_logs([run_id])
        return stored[0] if stored else None

    async def hold(self, run_id: str) -> str | None:
        """Hold this sidecar's parked run ``run_id`` back for a client re-attaching here:
        ``None`` once held (no other sidecar may take it now); else the run is another's:
        the message of its loss."""
        me, token = self.sidecar_id, self.claims.tokens.get(run_id)
        if token is None:  # not written yet, or forgotten: nothing for another to take
            return None
        answer = await _store(self.client.eval(HOLD, 1, self.keys.meta(run_id), me, token))
        if answer is None:  # its keys vanished: its next frame fails the run, saying so
            raise SidecarError(grpc.StatusCode.DATA_LOSS, gone_message(run_id, self.shown))
        holder = _text(answer)
        if not holder:
            self.claims.parked.discard(run_id)
            return None
        return self.claims.lost(run_id, holder)

    async def park(self, run_id: str) -> None:
        """Mark this sidecar's run ``run_id`` parked: another sidecar may take it now."""
        token = self.claims.tokens.get(run_id)
        if token is None:
            return
        # Counted as parked before the store may say so: from then on its tool calls wait for
        # their starts to be stored (another sidecar may take it at any moment).
        self.claims.parked.add(run_id)
        try:
            await self.client.eval(PARK, 1, self.keys.meta(run_id), self.sidecar_id, token)
        except RedisError as exc:  # only a client re-attaching here can have it then
            log.warning("parked run not marked in the store", run_id=run_id, error=repr(exc))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


async def _store(call: Awaitable[T]) -> T:
    """``call``'s answer; ``UNAVAILABLE`` naming the store's error if it fails."""
    try:
        return await call
    except RedisError as exc:
        raise SidecarError(
            grpc.StatusCode.UNAVAILABLE,
            f"the shared run store cannot be reached ({type(exc).__name__}: {exc}); retry later",
        ) from None
