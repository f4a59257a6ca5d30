"""The Go example the README's tour shows builds and runs a Session against a real sidecar."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from .conftest import GO_LINK, go_env, serving_sidecar

#: A Go build of gRPC from a cold cache takes minutes on a loaded two-core machine.
BUILD_S = 600.0


async def _run(*args: str, env: dict[str, str], cwd: Path, timeout: float) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *args, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(timeout):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """client/go/examples/session, built once for this module's tests."""
    binary = tmp_path_factory.mktemp("go") / "session"
    built = subprocess.run(
        ["go", "build", "-o", str(binary), "./examples/session"],
        cwd=GO_LINK, env=go_env(), capture_output=True, text=True, timeout=BUILD_S, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    return binary


@pytest.mark.timeout(BUILD_S + 120)
async def test_the_go_example_hosts_its_tools_and_prints_the_run(
    example: Path, tmp_path: Path
) -> None:
    env = go_env()
    async with serving_sidecar() as address:
        code, out, err = await _run(str(example), address, env=env, cwd=tmp_path, timeout=60)
    assert code == 0, err
    lines = out.splitlines()
    # The two capital_of calls run at once: their records come in the order they end.
    by_call = {line.split()[1]: line for line in lines[:3]}
    assert {call: line.split()[2] for call, line in by_call.items()} == {
        "call_1": "capital_of",
        "call_2": "capital_of",
        "call_3": "word_count",
    }
    assert lines[2] == by_call["call_3"]  # word_count is asked for after both answers
    assert by_call["call_1"].endswith('ok      {"country":"France","capital":"Paris"}')
    assert by_call["call_2"].endswith("FAILED  no capital on file for Atlantis")
    assert by_call["call_3"].endswith('ok      {"result":6}')
    assert lines[4] == (
        "final answer: The capital of France is Paris (6 words). Atlantis is not on file."
    )
    assert lines[5] == (
        "STOP_REASON_FINAL_ANSWER, 3 iterations, 3 tool calls (1 failed), tokens in/out 1530/98"
    )


@pytest.mark.timeout(BUILD_S + 120)
async def test_the_go_example_names_a_missing_sidecar(example: Path, tmp_path: Path) -> None:
    code, out, err = await _run(str(example), "127.0.0.1:1", env=go_env(), cwd=tmp_path, timeout=60)
    assert code == 1, out
    assert "no sidecar answers at 127.0.0.1:1; start one with: cleveragents-sidecar serve" in err
