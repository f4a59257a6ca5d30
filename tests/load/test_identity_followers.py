"""One identity's stalled FollowRun watchers share one bound on what they hold unacknowledged
(``watch_window_bytes_per_identity``): past it a watcher is dropped RESOURCE_EXHAUSTED naming
the setting, the sidecar's memory stays within it, and another identity's watcher of the same
run is served meanwhile."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cleveragents.client import AsyncSidecarClient

if TYPE_CHECKING:
    from tests.conftest import ServedSidecar, ServeSidecar

MIB = 1024 * 1024
#: What the observer's watchers may hold together, and how many it opens (each held a
#: message of the run's first event, 4 MiB: 240 of them took +966 MiB).
SHARED_BYTES = 16 * MIB
FOLLOWERS = 60
OWNER, OBSERVER = "owner-token-3f9a61c2", "observer-token-7d2e90b4"

#: Opens COUNT FollowRuns of run ``big`` on one connection and never reads them; prints each
#: call's status as it ends.
STALLED_OBSERVER = str(Path(__file__).with_name("stalled_observer.py"))


@pytest.fixture
def sidecar(serve_sidecar: ServeSidecar, tmp_path: Path) -> ServedSidecar:
    """Two identities: ``owner`` and ``observer`` (which reads every run)."""
    config = tmp_path / "sidecar.toml"
    config.write_text(
        '[clients.owner]\ntoken_env = "OWNER_TOKEN"\n'
        '[clients.observer]\ntoken_env = "OBSERVER_TOKEN"\nroles = ["observer"]\n',
        encoding="utf-8",
    )
    return serve_sidecar(
        "--config", str(config), env={"OWNER_TOKEN": OWNER, "OBSERVER_TOKEN": OBSERVER},
        stderr=subprocess.PIPE, watcher_stall_s=1, watch_window_bytes_per_identity=SHARED_BYTES,
    )  # fmt: skip


def _start_observer(address: str) -> subprocess.Popen[str]:
    command = [sys.executable, STALLED_OBSERVER, address, OBSERVER, str(FOLLOWERS)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def _wait_for_drops(sidecar: ServedSidecar, count: int) -> None:
    """Read the sidecar's log until it has dropped ``count`` watchers (for whatever reason)."""
    log = sidecar.process.stderr
    assert log is not None
    dropped = 0
    while dropped < count:
        line = log.readline()
        assert line, "the sidecar's log ended"
        if line.startswith("{") and json.loads(line).get("event") == "watcher dropped":
            dropped += 1


def _statuses(observer: subprocess.Popen[str], count: int) -> list[str]:
    assert observer.stdout is not None
    return [observer.stdout.readline().strip() for _ in range(count)]


@pytest.mark.timeout(240)
async def test_one_identitys_stalled_followers_share_one_bound_and_others_are_served(
    sidecar: ServedSidecar,
) -> None:
    async with AsyncSidecarClient(sidecar.address, token=OWNER) as owner:
        await owner.run_tool_loop("p" * (4 * MIB), run_id="big")
        before = sidecar.status_kib()
        observer = _start_observer(sidecar.address)
        try:
            # At most SHARED_BYTES / 4 MiB of them have a message in flight; all the others
            # are dropped once they have waited watcher_stall_s for room (and any stuck in a
            # write once it has lasted as long).
            refused = FOLLOWERS - SHARED_BYTES // (4 * MIB)
            await asyncio.to_thread(_wait_for_drops, sidecar, refused)
            growth = (sidecar.status_kib() - before) * 1024
            print(f"{FOLLOWERS} stalled followers of one identity: +{growth / MIB:.1f} MiB RSS")
            assert growth < SHARED_BYTES + 48 * MIB, growth  # 60 x 4 MiB without the bound
            dropped = await asyncio.wait_for(
                asyncio.to_thread(_statuses, observer, refused), timeout=120
            )
            seen = [event.sequence async for event in owner.watch("big")]
            total = (await owner.get_run("big")).last_sequence
        finally:
            observer.kill()
            observer.wait(15)

    assert all(line.startswith("RESOURCE_EXHAUSTED ") for line in dropped), dropped[:3]
    assert all("identity 'observer'" in line for line in dropped), dropped[:3]
    assert all(f"watch_window_bytes_per_identity is {SHARED_BYTES}" in line for line in dropped)
    assert all("reconnect with after_sequence=0" in line for line in dropped)
    assert seen == list(range(1, total + 1))  # the owner's own window is untouched
