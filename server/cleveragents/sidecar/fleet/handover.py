"""Handing a parked Session run over to the sidecar of a Redis fleet its client re-attached to.

A Session run parks on the sidecar that runs it (B) when its client goes away. If the client
re-attaches to another live sidecar (C), C sends B a ``release`` on B's control stream and
waits (at most ``min(event_store_lease_s, 5 s)``) for the answer on its own control stream.
B hands the run over only if it is parked, for the identity that owns it, to a sidecar whose
lease lives: it reserves it (no client can re-attach there meanwhile), moves the run to C with
the fencing claim (``redis_fence.CLAIM``: a new token, C named in the run's hash), so that
exactly one sidecar writes the run at every moment, and only then stops its copy without
writing (as for a run taken over); a claim that fails leaves the run parked on B. It answers
``released`` with the token, or ``refused`` saying why (``attached``: a client stream holds
the run; ``gone``: it is not live there).

C takes a ``released`` only for an ask of its own whose claim the run's hash confirms; it
reads the log after the claim and takes the run as an adoption does, and the waiting
re-attach goes on at once. An answer that comes after C stopped waiting is taken all the
same: the run then waits on C for its client. A run the store says C runs though C does not
(the answer was lost: B died, or Redis failed, between the claim and the answer) is claimed
again by C at the next re-attach, and taken the same way. A ``release`` written before this
sidecar started (its control stream is read from the start) is ignored: its asker stopped
waiting long ago.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import structlog
from redis.exceptions import RedisError

from cleveragents.sidecar.fleet.fencing import CLAIM
from cleveragents.sidecar.fleet.keys import lease_key, meta_key, runs_of_key
from cleveragents.sidecar.fleet.mirrors import GONE, REFUSED, RELEASE, RELEASED, Control
from cleveragents.sidecar.runs.store import StoredRun

if TYPE_CHECKING:
    from cleveragents.sidecar.fleet.lease import RedisFleet

__all__ = ["MAX_WAIT_S", "RedisHandovers", "handed_over_message"]

log = structlog.get_logger("cleveragents.sidecar.store")

#: The longest a sidecar waits for the owner's answer (less with a shorter lease).
MAX_WAIT_S = 5.0
#: How many of its own asks a sidecar remembers, so that a late answer is still taken.
_ASKS_KEPT = 1024


def handed_over_message(run_id: str, me: str, to: str) -> str:
    """What the streams of a run this sidecar (``me``) handed over are told."""
    return (
        f"run {run_id!r} was handed over to sidecar {to!r}, where its client re-attached: "
        f"its copy on this sidecar ({me!r}) stopped; follow the run with WatchRun, FollowRun "
        "or GetRun on any sidecar sharing the store"
    )


class RedisHandovers:
    """Both ends of a hand-over: asking the owner, and answering as the owner."""

    def __init__(self, fleet: RedisFleet) -> None:
        self.fleet = fleet
        #: On the owner: ``(run_id, identity)`` → ``""`` if the run is parked here for that
        #: identity (it is reserved now), else why not (``ATTACHED``, ``GONE``).
        self.on_release: Callable[[str, str], str] | None = None
        #: On the owner, after the claim: ``(run_id, to, moved)``: stop the copy (moved to
        #: ``to``), or let the run wait here again (the claim failed).
        self.on_claimed: Callable[[str, str, bool], None] | None = None
        #: Redis's clock (ms) when this sidecar started: older ``release`` asks are stale.
        self.started_ms = 0
        #: On the new owner: take the run ``StoredRun`` holds, handed over by the sidecar
        #: named; ``True`` if a re-attach waits for it (it is kept for that re-attach).
        self.on_handed: Callable[[StoredRun, str, bool], None] | None = None
        #: Runs handed over to this sidecar, and runs it handed to others (metrics, tests).
        self.taken = 0
        self.given = 0
        self._waiting: dict[str, asyncio.Future[Control]] = {}
        self._asked: OrderedDict[str, None] = OrderedDict()

    @property
    def wait_s(self) -> float:
        """How long an ask waits for the owner's answer."""
        return min(self.fleet.lease_s, MAX_WAIT_S)

    async def ask(self, sidecar: str, run_id: str, identity: str) -> Control | None:
        """Ask ``sidecar`` to hand ``run_id`` over; its answer (``released``: the run is this
        sidecar's now, taken already), or ``None`` if none came within ``wait_s``."""
        fleet = self.fleet
        if not await fleet.client.exists(lease_key(sidecar)):
            return None  # its lease expired: the fleet adopts the run (ask again then)
        request_id = uuid.uuid4().hex
        future: asyncio.Future[Control] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        self._asked[request_id] = None
        while len(self._asked) > _ASKS_KEPT:
            self._asked.popitem(last=False)
        try:
            if sidecar == fleet.sidecar_id:  # the store names this sidecar, which lacks it
                await self._orphan(run_id, request_id)
            else:
                ask = Control(RELEASE, run_id, call_id=request_id, identity=identity)
                await fleet.send_control(sidecar, ask)
            async with asyncio.timeout(self.wait_s):
                return await future
        except TimeoutError:
            return None
        finally:
            del self._waiting[request_id]

    async def _orphan(self, run_id: str, request_id: str) -> None:
        """Take a live run the store says this sidecar runs though it does not: handed over
        to it by a sidecar whose answer never came (it died, or Redis failed in between).
        It is claimed again (a new token) and taken as a handed-over run is."""
        me = self.fleet.sidecar_id
        token = int(await self.fleet.client.eval(CLAIM, 1, meta_key(run_id), me, me) or 0)
        if token:
            answer = Control(RELEASED, run_id, call_id=request_id, sender=me, token=token)
        else:  # no longer this sidecar's: another took it meanwhile
            answer = Control(REFUSED, run_id, GONE, request_id, sender=me)
        await self._answered(answer)

    async def handle(self, control: Control, sent_ms: int = 0) -> bool:
        """Act on ``control`` (sent at ``sent_ms``, Redis's clock) if it is part of a
        hand-over; ``False`` if it is not."""
        if control.op == RELEASE:
            if sent_ms >= self.started_ms:  # an older ask was sent to a previous start
                await self._release(control)
        elif control.op in (RELEASED, REFUSED):
            await self._answered(control)
        else:
            return False
        return True

    async def _release(self, request: Control) -> None:
        """As the owner: hand the run over to the asking sidecar if it is parked here."""
        fleet, run_id, to = self.fleet, request.run_id, request.sender
        refusal = GONE
        if to and self.on_release is not None and self.on_claimed is not None:
            try:
                if await fleet.client.exists(lease_key(to)):  # else nobody would take it
                    refusal = self.on_release(run_id, request.identity)
            except RedisError as exc:
                log.error("hand-over failed", run_id=run_id, to=to, error=repr(exc))
        token = 0
        if not refusal:  # reserved here: claimed for ``to``, then stopped here
            try:
                token = int(cast("int | None", await fleet.client.eval(
                    CLAIM, 1, meta_key(run_id), to, fleet.sidecar_id,
                )) or 0)  # fmt: skip
                if token:
                    fleet.tokens.pop(run_id, None)
                    async with fleet.client.pipeline(transaction=False) as pipe:
                        pipe.srem(runs_of_key(fleet.sidecar_id), run_id)
                        pipe.sadd(runs_of_key(to), run_id)
                        await pipe.execute()
            except RedisError as exc:
                log.error("hand-over failed", run_id=run_id, to=to, error=repr(exc))
            assert self.on_claimed is not None
            self.on_claimed(run_id, to, bool(token))  # its copy stops, or it waits again
            if not token:
                refusal = GONE
            else:
                self.given += 1
                log.info("run handed over", run_id=run_id, to=to)
        op = RELEASED if token else REFUSED
        answer = Control(op, run_id, refusal, request.call_id, token=token)
        try:
            await fleet.send_control(to, answer)
        except RedisError as exc:  # the asker times out; a released run waits for it
            log.error("hand-over answer not sent", run_id=run_id, to=to, error=repr(exc))

    async def _answered(self, answer: Control) -> None:
        """As the asker: take a released run (read after the claim), then wake the ask."""
        waiting = self._waiting.get(answer.call_id)
        if answer.op == RELEASED and answer.token and await self._confirmed(answer):
            fleet = self.fleet
            fleet.tokens[answer.run_id] = answer.token
            await fleet.client.sadd(runs_of_key(fleet.sidecar_id), answer.run_id)
            stored = await fleet.claimed_logs([answer.run_id])
            if stored and self.on_handed is not None:
                self.taken += 1
                self.on_handed(stored[0], answer.sender, waiting is not None and not waiting.done())
        if waiting is not None and not waiting.done():
            waiting.set_result(answer)

    async def _confirmed(self, answer: Control) -> bool:
        """Whether ``answer`` releases a run to this sidecar for an ask of its own, as the
        run's hash says (this sidecar named, with the answer's token): a replayed, forged or
        stale answer is ignored."""
        fleet = self.fleet
        if answer.call_id not in self._asked:
            log.warning("hand-over answer to no ask of this sidecar ignored", run_id=answer.run_id)
            return False
        fields = await fleet.client.hmget(meta_key(answer.run_id), ["sidecar", "epoch"])
        sidecar, epoch = cast("list[bytes | None]", fields)
        if (sidecar or b"").decode() != fleet.sidecar_id or int(epoch or 0) != answer.token:
            log.warning("hand-over answer the store does not confirm ignored", run_id=answer.run_id)
            return False
        return True
