"""The console over HTTP, without a browser: what every response says about itself, who may ask
what, what a forged request gets, the feeds' format and bounds, and the console off."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any

import aiohttp
import pytest

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import ClientConfig, ConfigError, Sidecar, SidecarConfig
from cleveragents.tool import ToolRegistry

Start = Callable[..., Awaitable[Sidecar]]
TOKENS = {"alice": "alice-token-0123456789abcdef", "olga": "olga-token-0123456789abcdef",
          "bob": "bob-token-0123456789abcdef"}  # fmt: skip
DEPLOY: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "d1", "name": "deploy", "arguments": {"target": "prod"}}]},
    {"content": "done"},
]
JSON_ACTION = {"Content-Type": "application/json", "X-Console-Request": "1"}


def _tools(release: asyncio.Event | None = None) -> ToolRegistry:
    """``deploy`` (which asks approval) and ``hold``, which returns once ``release`` is set."""
    tools = ToolRegistry()

    @tools.tool
    async def hold() -> str:
        """Wait until the test lets go."""
        assert release is not None
        await release.wait()
        return "released"

    @tools.tool(side_effects=True)
    async def deploy(target: str) -> str:
        """Deploy."""
        return target

    return tools


@pytest.fixture
async def start(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Start]:
    running: list[Sidecar] = []
    for name, token in TOKENS.items():
        monkeypatch.setenv(f"TOKEN_{name.upper()}", token)

    async def run(**settings: Any) -> Sidecar:
        settings.setdefault("console_listen", "127.0.0.1:0")
        settings.setdefault("approval_timeout_unattended_s", 60.0)
        tools = _tools(settings.pop("release", None))
        sidecar = Sidecar(SidecarConfig(listen="127.0.0.1:0", **settings), tools)
        await sidecar.start()
        running.append(sidecar)
        return sidecar

    yield run
    for sidecar in running:
        await sidecar.stop(0.5)


def people() -> dict[str, ClientConfig]:
    return {
        "alice": ClientConfig("alice", token_env="TOKEN_ALICE"),
        "olga": ClientConfig("olga", token_env="TOKEN_OLGA", roles=frozenset({"observer"})),
        "bob": ClientConfig("bob", token_env="TOKEN_BOB"),
    }


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[name]}"}


async def sse_events(response: aiohttp.ClientResponse) -> list[tuple[str, Any]]:
    """Every server-sent event of a feed that ends."""
    text = (await response.read()).decode()
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


async def test_every_response_says_how_a_browser_must_treat_it(start: Start) -> None:
    sidecar = await start(clients=people())
    url = sidecar.console_url
    async with aiohttp.ClientSession() as http:
        async with AsyncSidecarClient(sidecar.address, token=TOKENS["alice"]) as client:
            await client.run_tool_loop("x", script=[{"content": "ok"}], run_id="r1")
        responses = []
        for path, headers in [
            ("", {}), ("static/console.js", {}), ("static/console.css", {}), ("api/ping", {}),
            ("api/me", {}), ("api/me", bearer("alice")), ("nothing-here", {}),
            ("api/runs/r1/events", bearer("alice")),
        ]:  # fmt: skip
            async with http.get(url + path, headers=headers) as response:
                await response.read()
                responses.append((path, response.status, response.headers))
    assert [status for _, status, _ in responses] == [200, 200, 200, 200, 401, 200, 404, 200]
    for path, _, said in responses:
        csp = said["Content-Security-Policy"]
        assert "default-src 'none'" in csp, path
        assert "script-src 'self';" in csp
        assert "frame-ancestors 'none'" in csp
        assert "unsafe" not in csp
        assert said["X-Content-Type-Options"] == "nosniff"
        assert "Set-Cookie" not in said
    assert responses[-1][2]["Content-Type"].startswith("text/event-stream")
    assert responses[-1][2]["Cache-Control"] == "no-store"


def test_the_page_has_no_inline_script_no_inline_handler_and_builds_no_markup() -> None:
    static = resources.files("cleveragents.sidecar.console") / "static"
    page = (static / "index.html").read_text(encoding="utf-8")
    script = (static / "console.js").read_text(encoding="utf-8")

    assert re.findall(r"<script\b[^>]*>", page) == [
        '<script type="module" src="/static/console.js">'
    ]
    assert not re.search(r"\son\w+\s*=", page)
    assert not re.search(r"\sstyle\s*=", page)
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function", "setTimeout(\"", "javascript:"):  # fmt: skip
        assert sink not in script, sink


async def test_a_forged_action_is_refused_before_anything_happens(start: Start) -> None:
    sidecar = await start()
    async with AsyncSidecarClient(sidecar.address) as client:
        calls = client.stream_tool_loop("deploy", script=DEPLOY, run_id="target", detach=True)
        async for _ in calls:
            break
    cancel = sidecar.console_url + "api/runs/target/cancel"
    origin = sidecar.console_url.rstrip("/")
    async with aiohttp.ClientSession() as http:
        answers = []
        for headers, body in [
            ({"Content-Type": "text/plain"}, "{}"),  # what a cross-site form can send
            ({"Content-Type": "application/json"}, "{}"),  # no X-Console-Request
            ({**JSON_ACTION, "Origin": "https://evil.example"}, "{}"),
            ({**JSON_ACTION, "Sec-Fetch-Site": "cross-site"}, "{}"),
        ]:
            async with http.post(cancel, headers=headers, data=body) as response:
                answers.append((response.status, (await response.json())["error"]))
        async with http.post(
            cancel, headers={**JSON_ACTION, "Origin": origin}, data="{}"
        ) as response:
            allowed = response.status, await response.json()
    assert [status for status, _ in answers] == [403, 403, 403, 403]
    assert "X-Console-Request" in answers[0][1]
    assert "cross-origin" in answers[2][1]
    assert allowed == (200, {"state": "cancelled"})


async def test_with_auth_off_a_host_other_than_the_consoles_is_refused(start: Start) -> None:
    sidecar = await start()
    port = sidecar.console_url.rstrip("/").rsplit(":", 1)[1]
    async with aiohttp.ClientSession() as http:
        async with http.get(
            sidecar.console_url + "api/me", headers={"Host": f"rebound.example:{port}"}
        ) as rebound:
            refused = rebound.status
        async with http.get(
            sidecar.console_url + "api/me", headers={"Host": f"localhost:{port}"}
        ) as named:
            served = named.status
    assert (refused, served) == (421, 200)


async def test_a_missing_or_unknown_token_is_refused_and_counted(start: Start) -> None:
    sidecar = await start(clients=people())
    async with aiohttp.ClientSession() as http:
        statuses = []
        for headers in ({}, {"Authorization": "Bearer guessed-0123456789"}, bearer("olga")):
            async with http.get(sidecar.console_url + "api/me", headers=headers) as response:
                statuses.append((response.status, await response.json()))
    assert [status for status, _ in statuses] == [401, 401, 200]
    assert statuses[2][1] == {"identity": "olga", "roles": ["observer"], "auth": "token"}
    assert sidecar.rejections.count == 2


async def test_an_observer_may_not_decide_and_a_stranger_finds_no_run(start: Start) -> None:
    sidecar = await start(clients=people())
    async with AsyncSidecarClient(sidecar.address, token=TOKENS["alice"]) as alice:
        async for _ in alice.stream_tool_loop("x", script=DEPLOY, run_id="alices", detach=True):
            break
    run = sidecar.console_url + "api/runs/alices/"
    decision = json.dumps({"call_id": "d1", "approved": True, "reason": ""})
    async with aiohttp.ClientSession() as http:
        async with http.post(
            run + "decisions", headers={**JSON_ACTION, **bearer("olga")}, data=decision
        ) as observer:
            refused = observer.status, (await observer.json())["error"]
        async with http.get(run + "events", headers=bearer("bob")) as stranger:
            hidden = stranger.status, (await stranger.json())["error"]
        async with http.post(run + "cancel", headers={**JSON_ACTION, **bearer("bob")},
                             data="{}") as stranger_cancel:  # fmt: skip
            hidden_cancel = stranger_cancel.status
        async with http.get(sidecar.console_url + "api/runs", headers=bearer("bob")) as feed:
            first = (await feed.content.readuntil(b"\n\n")).decode()
    assert refused[0] == 403
    assert "approver or admin role" in refused[1]
    assert hidden == (404, "no run with id 'alices' (unknown, or expired)")
    assert hidden_cancel == 404
    assert first == "event: runs\ndata: []\n\n"


async def test_a_runs_feed_is_its_header_its_events_then_its_end(start: Start) -> None:
    sidecar = await start()
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "d1", "name": "deploy", "arguments": {"target": "qa"}}],
         "usage": {"input_tokens": 10, "output_tokens": 2}},
        {"content": "done"},
    ]  # fmt: skip
    async with AsyncSidecarClient(sidecar.address) as client:
        events = client.stream_tool_loop("x", script=script, run_id="fed")
        async for streamed in events:
            if type(streamed.event).__name__ == "ApprovalRequested":
                await client.decide_approval("fed", "d1", approved=True)
    url = sidecar.console_url + "api/runs/fed/events?after=2"
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        feed = await sse_events(response)
    names = [name for name, _ in feed]
    assert names[0] == "run"
    assert names[-1] == "end"
    header, end = feed[0][1], feed[-1][1]
    kinds = [e["kind"] for name, batch in feed if name == "events" for e in batch]
    assert header["run_id"] == "fed"
    assert header["may_decide"]
    assert header["may_cancel"]
    assert kinds == [
        "llm_responded", "tool_call_started", "approval_requested", "approval_decided",
        "tool_call_completed", "iteration_started", "llm_responded", "run_completed",
    ]  # fmt: skip
    assert end == {"state": "completed", "stop_reason": "final_answer", "dropped": False,
                   "lost": None, "last_sequence": 10}  # fmt: skip


async def test_a_run_nobody_follows_has_no_reader_from_the_console(start: Start) -> None:
    sidecar = await start()
    async with AsyncSidecarClient(sidecar.address) as client:
        async for _ in client.stream_tool_loop("x", script=DEPLOY, run_id="alone", detach=True):
            break
    run = sidecar.manager.get("alone")
    assert run is not None
    # The detached stream's queue leaves once its handler sees the cancel, maybe only later.
    streams = set(run.log.sinks)
    url = sidecar.console_url
    async with aiohttp.ClientSession() as http, http.get(url + "api/runs") as listing:
        await listing.content.readuntil(b"\n\n")  # a runs list is open, and lists it
        listed = (list(run.log.cursors), set(run.log.sinks) - streams)
        async with http.get(url + "api/runs/alone/events") as page:
            await page.content.readuntil(b"\n\n")
            followed = len(run.log.cursors)
    assert listed == ([], set())
    assert followed == 1


async def test_a_page_that_may_decide_makes_an_approval_wait_for_it(start: Start) -> None:
    release = asyncio.Event()
    # Nobody following: an approval would be denied at once.
    sidecar = await start(approval_timeout_unattended_s=0.0, release=release)
    script = [{"tool_calls": [{"id": "h", "name": "hold", "arguments": {}}]}, *DEPLOY]
    async with AsyncSidecarClient(sidecar.address) as client:
        async for _ in client.stream_tool_loop("x", script=script, run_id="held", detach=True):
            break
    url = sidecar.console_url + "api/runs/held/"
    decision = json.dumps({"call_id": "d1", "approved": True, "reason": "from the page"})
    async with aiohttp.ClientSession() as http, http.get(url + "events") as page:
        await page.content.readuntil(b"\n\n")  # the page follows the run
        release.set()
        while b'"approval_requested"' not in await page.content.readuntil(b"\n\n"):
            pass
        async with http.post(url + "decisions", headers=JSON_ACTION, data=decision) as answer:
            decided = answer.status
        rest = (await page.read()).decode()
    assert decided == 200
    assert '"by":"rpc","identity":"default"' in rest
    assert '"stop_reason":"final_answer"' in rest


async def test_bad_actions_get_a_message_that_says_what_is_wrong(start: Start) -> None:
    sidecar = await start()
    base = sidecar.console_url + "api/runs/"
    async with aiohttp.ClientSession() as http:
        answers = []
        for path, body in [
            ("none/decisions", "not json"),
            ("none/decisions", json.dumps({"call_id": "c", "approved": "yes"})),
            ("none/decisions", json.dumps({"call_id": "c", "approved": True})),
            ("none/cancel", json.dumps({"reason": 7})),
        ]:
            async with http.post(base + path, headers=JSON_ACTION, data=body) as response:
                answers.append((response.status, (await response.json())["error"]))
        async with http.get(base + "none/events?after=-1") as negative:
            answers.append((negative.status, (await negative.json())["error"]))
    assert answers == [
        (400, "the body must be a JSON object"),
        (400, "a decision is {call_id: string, approved: true|false, reason}"),
        (404, "no run with id 'none' (unknown, or expired)"),
        (400, "reason must be a string"),
        (400, "after must not be negative"),
    ]


async def test_feeds_beyond_console_max_streams_are_refused_until_one_ends(start: Start) -> None:
    sidecar = await start(console_max_streams=1)
    async with aiohttp.ClientSession() as http, AsyncSidecarClient(sidecar.address) as client:
        async for _ in client.stream_tool_loop("x", script=DEPLOY, run_id="held", detach=True):
            break
        async with http.get(sidecar.console_url + "api/runs/held/events") as feed:
            await feed.content.readuntil(b"\n\n")  # its header: the feed is open
            async with http.get(sidecar.console_url + "api/runs") as second:
                refused = second.status, (await second.json())["error"]
            await client.decide_approval("held", "d1", approved=True)
            await feed.read()  # to its end: the run ended, so its feed did
        async with http.get(sidecar.console_url + "api/runs") as again:
            first = await again.content.readuntil(b"\n\n")
    assert refused[0] == 503
    assert "console_max_streams" in refused[1]
    assert first.startswith(b"event: runs\n")


def test_the_console_is_off_by_default_and_aiohttp_never_imported() -> None:
    probe = (
        "import asyncio, sys\n"
        "from cleveragents.sidecar import Sidecar, SidecarConfig\n"
        "async def main():\n"
        "    sidecar = Sidecar(SidecarConfig(listen='127.0.0.1:0'))\n"
        "    await sidecar.start()\n"
        "    print('RESULT', repr(sidecar.console_url), 'aiohttp' in sys.modules)\n"
        "    await sidecar.stop(0)\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout
    assert [line for line in out.splitlines() if line.startswith("RESULT")] == ["RESULT '' False"]


async def test_a_console_beyond_loopback_needs_callers_to_authenticate(start: Start) -> None:
    with pytest.raises(
        ConfigError, match=re.escape("refusing to serve the console on '0.0.0.0:0'")
    ):
        await start(console_listen="0.0.0.0:0")


async def test_a_console_port_in_use_fails_the_start_naming_it(start: Start) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(
            ConfigError, match=re.escape(f"cannot serve the console on '127.0.0.1:{port}'")
        ):
            await start(console_listen=f"127.0.0.1:{port}")
