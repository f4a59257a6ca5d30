"""The owner's side of a hand-over when the fencing claim fails: the run stays where it was.

A hand-written fake of the fleet's Redis client stands in here (a unit): the claim's failure
must come between the reserve and the claim, which a real Redis cannot be made to do on cue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from redis.exceptions import ConnectionError as RedisConnectionError

from cleveragents.sidecar.fleet.handover import RedisHandovers
from cleveragents.sidecar.fleet.mirrors import GONE, REFUSED, RELEASE, Control

if TYPE_CHECKING:
    from cleveragents.sidecar.fleet.lease import RedisFleet


class ClaimFails:
    """A Redis client whose every script fails as a dropped connection does."""

    async def exists(self, key: str) -> int:
        return 1  # the asker's lease lives

    async def eval(self, *args: Any) -> Any:
        raise RedisConnectionError("Connection reset by peer")


class Fleet:
    """What a hand-over uses of ``RedisFleet``: its client, id, tokens and control sends."""

    def __init__(self) -> None:
        self.client = ClaimFails()
        self.sidecar_id = "beta"
        self.lease_s = 1.0
        self.tokens = {"parked": 3}
        self.sent: list[tuple[str, Control]] = []

    async def send_control(self, sidecar: str, control: Control) -> None:
        self.sent.append((sidecar, control))


async def test_a_release_whose_claim_fails_leaves_the_run_parked_and_answers_refused() -> None:
    fleet = Fleet()
    handovers = RedisHandovers(cast("RedisFleet", fleet))
    reserved: list[str] = []
    claimed: list[tuple[str, str, bool]] = []

    def reserve(run_id: str, identity: str) -> str:
        reserved.append(run_id)
        return ""  # parked here for that identity: reserved

    handovers.on_release = reserve
    handovers.on_claimed = lambda run_id, to, moved: claimed.append((run_id, to, moved))
    ask = Control(RELEASE, "parked", call_id="ask-1", identity="alice", sender="gamma")
    assert await handovers.handle(ask, sent_ms=1)
    assert reserved == ["parked"]
    assert claimed == [("parked", "gamma", False)]  # not moved: it waits on beta again
    assert fleet.tokens == {"parked": 3}  # still beta's to write
    [(to, answer)] = fleet.sent
    assert (to, answer.op, answer.reason, answer.call_id) == ("gamma", REFUSED, GONE, "ask-1")
    assert handovers.given == 0
