"""The lease metrics of a sidecar on a shared (Redis) run store, scraped over HTTP."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

from cleveragents.sidecar import Sidecar, SidecarConfig
from tests.redis_server import RedisServer

from .conftest import WAIT_S, sample, samples, scrape

FAILURES = "cleveragents_store_lease_renewal_failures_total"


async def _counts(port: int) -> tuple[float, float, float]:
    status, text = await scrape(port)
    assert status == 200
    values = samples(text)
    assert (FAILURES, frozenset()) in values, "no lease metrics exposed"
    return (
        sample(values, FAILURES),
        sample(values, "cleveragents_store_adopted_runs_total"),
        sample(values, "cleveragents_store_runs_taken_over_total"),
    )


async def test_lease_renewals_that_fail_while_redis_is_down_are_counted_on_the_metrics_port(
    redis_factory: Callable[..., RedisServer],
) -> None:
    redis_server = redis_factory().start()
    config = SidecarConfig(
        listen="127.0.0.1:0",
        metrics_listen="127.0.0.1:0",
        event_store=redis_server.url,
        event_store_lease_s=0.3,  # renewed every 0.1 s
        sandbox_roots=(os.environ["CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"],),
    )
    sidecar = Sidecar(config)
    await sidecar.start()
    try:
        assert sidecar.metrics_port
        before = await _counts(sidecar.metrics_port)
        redis_server.stop()
        deadline = time.monotonic() + 10 * WAIT_S
        while (during := await _counts(sidecar.metrics_port))[0] < 2:
            assert time.monotonic() < deadline, "no failed renewal counted"
            await asyncio.sleep(0.05)  # the next scrape: the heartbeat runs on its own clock
    finally:
        await sidecar.stop(1.0)
    assert before == (0, 0, 0)
    assert during[0] >= 2
    assert during[1:] == (0, 0)
