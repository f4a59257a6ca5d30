"""Finished runs with large specs, kept by a sidecar process: each spec once, and in all no
more than ``max_finished_run_bytes``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, SidecarRpcError

if TYPE_CHECKING:
    from tests.conftest import ServeSidecar

MIB = 1024 * 1024
#: A prompt this large (the default 16 MiB message limit allows it), run on the scripted LLM.
PROMPT_BYTES = 8 * MIB
SCRIPT = [{"content": "done"}]
#: One malloc arena in the sidecar: with glibc's default (one per thread that allocates) the
#: growth after the same runs swung from 31 to 75 MiB between runs on a loaded machine, which
#: says nothing of what the runs keep; with one it measured 26-35 MiB.
ONE_ARENA = {"MALLOC_ARENA_MAX": "1"}


async def _runs(client: AsyncSidecarClient, names: list[str]) -> None:
    for name in names:
        # Each prompt its own text: nothing may be shared between runs by accident.
        prompt = name[0] * PROMPT_BYTES
        await client.run_tool_loop(prompt, script=SCRIPT, run_id=name, timeout=60)


@pytest.mark.timeout(180)
async def test_a_finished_run_keeps_its_spec_once(serve_sidecar: ServeSidecar) -> None:
    sidecar = serve_sidecar(max_finished_run_bytes=1024 * MIB, env=ONE_ARENA)
    async with AsyncSidecarClient(sidecar.address) as client:
        await _runs(client, ["warm-up"])  # allocator and gRPC buffers at their working size
        before = sidecar.status_kib()
        names = [f"{letter}-run" for letter in "abcdef"]
        await _runs(client, names)
        after = sidecar.status_kib()
        assert [run.run_id for run in await client.list_runs(limit=10)][:6] == names[::-1]
    per_run = (after - before) * 1024 / len(names)
    print(f"sidecar RSS per retained run of a {PROMPT_BYTES // MIB} MiB prompt: "
          f"{per_run / MIB:.1f} MiB ({before} KiB -> {after} KiB)")  # fmt: skip
    # Kept once it is about 0.9-1.4 prompts with one arena (heap and gRPC buffers vary); a
    # spec kept twice is at least 2 (it measured 3.4).
    assert per_run < 1.8 * PROMPT_BYTES, per_run


@pytest.mark.timeout(180)
async def test_finished_runs_stay_within_their_byte_budget_oldest_forgotten_first(
    serve_sidecar: ServeSidecar,
) -> None:
    budget = 40 * MIB
    sidecar = serve_sidecar(max_finished_run_bytes=budget, env=ONE_ARENA)
    async with AsyncSidecarClient(sidecar.address) as client:
        await _runs(client, ["warm-up"])
        before = sidecar.status_kib()
        names = [f"{letter}-run" for letter in "abcdefghijkl"]
        await _runs(client, names)
        after = sidecar.status_kib()
        kept = [run.run_id for run in await client.list_runs(limit=100)]
        with pytest.raises(SidecarRpcError) as forgotten:
            await client.get_run("a-run")
        newest = await client.get_run("l-run")
    # Each run holds a little more than its prompt: 4 of them fit in 40 MiB.
    assert kept == names[:-5:-1], kept
    assert forgotten.value.code == grpc.StatusCode.NOT_FOUND
    assert newest.state == "completed"
    growth = (after - before) * 1024
    print(f"sidecar RSS after 12 runs of {PROMPT_BYTES // MIB} MiB prompts, {budget // MIB} MiB "
          f"budget: +{growth / MIB:.1f} MiB ({before} KiB -> {after} KiB)")  # fmt: skip
    # Besides the runs kept: what the allocator and gRPC hold after handling 8 MiB requests
    # (26-35 MiB of growth seen in all with one arena).
    assert growth < budget + 24 * MIB, growth
