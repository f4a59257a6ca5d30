"""The event loop the sidecar serves on: uvloop by default where it is installed, else asyncio."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import ConfigError, SidecarConfig, cli
from cleveragents.sidecar.config import load_config
from cleveragents.sidecar.eventloop import loop_factory
from cleveragents.tool import RunCompleted

from .conftest import CLI_WAIT_S, call, cli_sidecar, collect, terminate, turn

# Decided apart from the code under test, so that a broken `auto` fails rather than skips.
needs_uvloop = pytest.mark.skipif(
    importlib.util.find_spec("uvloop") is None, reason="uvloop is not installed here"
)


@needs_uvloop
def test_auto_picks_uvloop_when_it_is_installed() -> None:
    name, new_loop = loop_factory("auto")
    loop = new_loop()
    try:
        assert name == "uvloop"
        assert type(loop).__module__.startswith("uvloop")
    finally:
        loop.close()


def test_auto_falls_back_to_asyncio_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` now fails

    assert loop_factory("auto") == ("asyncio", asyncio.new_event_loop)


def test_asking_for_uvloop_without_it_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)

    with pytest.raises(ConfigError, match=r"uvloop cannot be imported.*'auto' or 'asyncio'"):
        loop_factory("uvloop")


def test_asyncio_is_asyncio_even_with_uvloop_installed() -> None:
    assert loop_factory("asyncio") == ("asyncio", asyncio.new_event_loop)


def test_an_unknown_event_loop_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="event_loop must be one of auto, asyncio, uvloop"):
        SidecarConfig(event_loop="trio")


def test_the_event_loop_comes_from_the_environment() -> None:
    config = load_config(env={"CLEVERAGENTS_SIDECAR_EVENT_LOOP": "asyncio"})

    assert config.process.event_loop == "asyncio"


def test_the_event_loop_comes_from_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.toml"
    path.write_text('event_loop = "asyncio"\n', encoding="utf-8")

    assert load_config(path, env={}).process.event_loop == "asyncio"


def test_the_cli_exits_2_when_asked_for_uvloop_it_cannot_import(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)
    monkeypatch.delenv("CLEVERAGENTS_SIDECAR_CONFIG", raising=False)

    code = cli.main(["serve", "--listen", "127.0.0.1:0", "--event-loop", "uvloop"])

    assert code == 2
    assert "uvloop cannot be imported" in capsys.readouterr().err


def test_the_cli_exits_2_for_an_unknown_event_loop_in_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLEVERAGENTS_SIDECAR_EVENT_LOOP", "trio")

    code = cli.main(["serve", "--listen", "127.0.0.1:0"])

    assert code == 2
    assert "event_loop must be one of auto, asyncio, uvloop, not 'trio'" in capsys.readouterr().err


async def _listening_log(stderr: asyncio.StreamReader) -> dict[str, object]:
    while line := await stderr.readline():
        entry = json.loads(line)
        if entry.get("event") == "sidecar listening":
            return dict(entry)
    raise AssertionError("the sidecar exited before it logged that it was listening")


@pytest.mark.parametrize("choice", ["asyncio", pytest.param("uvloop", marks=needs_uvloop)])
async def test_the_cli_serves_a_session_on_the_chosen_loop(choice: str) -> None:
    async with cli_sidecar("--event-loop", choice) as (process, address):
        assert process.stderr is not None
        async with asyncio.timeout(CLI_WAIT_S):
            logged = await _listening_log(process.stderr)

        def add(a: int, b: int) -> dict[str, int]:
            """Add two numbers, in the client."""
            return {"sum": a + b}

        script = [turn("adding", call("k1", "add", a=2, b=3)), turn("done")]
        async with AsyncSidecarClient(address) as client:
            events = await collect(client.session("go", tools=[add], script=script))
        code = await terminate(process)

    assert logged["event_loop"] == choice
    last = events[-1].event
    assert isinstance(last, RunCompleted)
    [record] = last.result.tool_call_history
    assert dict(record.output) == {"sum": 5}
    assert code == 0
