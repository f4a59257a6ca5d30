"""``Console``: the run console's HTTP server, on the sidecar's own event loop.

It serves the page (``static/``: plain HTML, CSS and JavaScript shipped in the wheel, no
build step, no CDN) and a small JSON API over the ``Gateway``, the same operations the gRPC
servicer calls, for the same identities and roles (``access``):

- ``GET /api/me``: who the page is (its identity and roles);
- ``GET /api/status``: the status strip (health, live runs, MCP servers, the store);
- ``GET /api/runs``: the runs list, live (``streams.RunsFeed``);
- ``GET /api/runs/{run_id}/events?after=N``: a run's timeline, live (``streams.follow_run``);
- ``POST /api/runs/{run_id}/cancel``: ``{"reason"}``;
- ``POST /api/runs/{run_id}/decisions``: ``{"call_id", "approved", "reason"}``.

A refused request gets a JSON ``{"error": message}`` with the HTTP status that matches the
gRPC one the same request would get.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

import structlog
from aiohttp import web

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.console.access import (
    SECURITY_HEADERS,
    Callers,
    Guard,
    Refusal,
    Rejecter,
    RequestHead,
)
from cleveragents.sidecar.console.address import page_url
from cleveragents.sidecar.console.streams import RunsFeed, StreamSlots, dumps, follow_run
from cleveragents.sidecar.console.views import status_view
from cleveragents.sidecar.errors import ConfigError, SidecarError
from cleveragents.sidecar.gateway import Gateway
from cleveragents.sidecar.identity import Identity

__all__ = ["Console"]

log = structlog.get_logger("cleveragents.sidecar.console")

#: A request body (a decision's reason) larger than this is refused.
_MAX_BODY = 64 * 1024
#: How long a stop waits for the open feeds before it cancels them.
_SHUTDOWN_S = 0.5
#: The files of the page, and their types.
_FILES = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
#: The HTTP status of each gRPC status a refused operation carries.
_HTTP_STATUS = {
    "INVALID_ARGUMENT": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "FAILED_PRECONDITION": 409,
    "RESOURCE_EXHAUSTED": 429,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
_CALLER = web.RequestKey("caller", Identity)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Console:
    """The run console at ``config.console.listen``, over ``gateway``; ``callers`` are the
    sidecar's credentials (refusals go to ``rejections``); ``tls`` serves it over HTTPS."""

    def __init__(
        self,
        gateway: Gateway,
        config: SidecarConfig,
        callers: Callers,
        rejections: Rejecter,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.gateway = gateway
        self.config = config
        self.callers = callers
        self.rejections = rejections
        self.tls = tls
        #: The page's address, once serving (``http://HOST:PORT/``).
        self.url = ""
        self.slots = StreamSlots(config.console.max_streams)
        self.feed = RunsFeed(gateway, config)
        self._guard: Guard | None = None
        self._runner: web.AppRunner | None = None
        static = resources.files(__package__) / "static"
        self._files = {name: (static / name).read_bytes() for name in _FILES}

    async def start(self) -> str:
        """Bind and serve; the page's URL. ``ConfigError`` if the address cannot be bound."""
        host, _, port = self.config.console.listen.rpartition(":")
        bind = host.strip("[]")
        app = web.Application(middlewares=[self._guarded], client_max_size=_MAX_BODY)
        app.on_response_prepare.append(_secure)
        app.router.add_get("/", self._page)
        app.router.add_get("/static/{name}", self._static)
        app.router.add_get("/api/ping", self._ping)
        app.router.add_get("/api/me", self._me)
        app.router.add_get("/api/status", self._status)
        app.router.add_get("/api/runs", self._runs)
        app.router.add_get("/api/runs/{run_id}/events", self._events)
        app.router.add_post("/api/runs/{run_id}/cancel", self._cancel)
        app.router.add_post("/api/runs/{run_id}/decisions", self._decide)
        runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=_SHUTDOWN_S
        )
        await runner.setup()
        site = web.TCPSite(runner, bind, int(port), ssl_context=self.tls)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise ConfigError(
                f"cannot serve the console on {self.config.console.listen!r}: {exc}"
            ) from None
        self._runner = runner
        bound = int(runner.addresses[0][1])
        self._guard = Guard.for_address(self.callers, self.rejections, bind, bound)
        self.url = page_url(host, bound, tls=self.tls is not None)
        return self.url

    async def stop(self) -> None:
        """Stop serving: open feeds end (a page then says the sidecar went away)."""
        runner, self._runner = self._runner, None
        self.feed.forget()
        if runner is not None:
            await runner.cleanup()

    # -- every request -------------------------------------------------------------------

    @web.middleware
    async def _guarded(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        guard = self._guard
        assert guard is not None
        head = _head(request)
        try:
            guard.check_origin(head)
            if request.path.startswith("/api/") and request.path != "/api/ping":
                request[_CALLER] = guard.caller(head)
            return await handler(request)
        except Refusal as refused:
            return _error(refused.status, refused.message)
        except SidecarError as exc:
            return _error(_HTTP_STATUS.get(exc.code.name, 500), exc.message)

    # -- the page --------------------------------------------------------------------------

    async def _page(self, request: web.Request) -> web.StreamResponse:
        return self._file("index.html")

    async def _static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in _FILES or name == "index.html":
            return _error(404, f"no file {name!r}")
        return self._file(name)

    def _file(self, name: str) -> web.Response:
        response = web.Response(body=self._files[name], content_type=None)
        response.headers["Content-Type"] = _FILES[name]
        response.headers["Cache-Control"] = "no-cache"
        return response

    # -- the API -------------------------------------------------------------------------

    async def _ping(self, request: web.Request) -> web.StreamResponse:
        return _json({"console": "cleveragents-sidecar"})

    async def _me(self, request: web.Request) -> web.StreamResponse:
        caller = request[_CALLER]
        if not self.callers.required:
            how = "none"
        else:
            how = "token" if "Authorization" in request.headers else "certificate"
        return _json({"identity": caller.name, "roles": sorted(caller.roles), "auth": how})

    async def _status(self, request: web.Request) -> web.StreamResponse:
        return _json(status_view(self.gateway.status()))

    async def _runs(self, request: web.Request) -> web.StreamResponse:
        caller = request[_CALLER]
        self.slots.take()
        try:
            response = await _event_stream(request)
            with contextlib.suppress(_Gone):
                async for message in self.feed.follow(caller):
                    await self._write(response, message)
        finally:
            self.slots.give()
        return response

    async def _events(self, request: web.Request) -> web.StreamResponse:
        caller = request[_CALLER]
        try:
            after = int(request.query.get("after", "0"))
        except ValueError:
            return _error(400, "after must be a whole number (a sequence)")
        if after < 0:
            return _error(400, "after must not be negative")
        self.slots.take()
        try:
            following = await self.gateway.follow(
                caller, request.match_info["run_id"], after, deltas=True
            )
            try:
                response = await _event_stream(request)
            except BaseException:
                self.gateway.unwatch(following.run, following.cursor)
                raise

            async def write(message: bytes) -> None:
                await self._write(response, message)

            with contextlib.suppress(_Gone):
                await follow_run(write, following, self.gateway, self.config)
        finally:
            self.slots.give()
        return response

    async def _cancel(self, request: web.Request) -> web.StreamResponse:
        caller = request[_CALLER]
        body = await _body(request)
        reason = _text(body, "reason") or f"cancelled from the console by {caller.name}"
        state = await self.gateway.cancel(caller, request.match_info["run_id"], reason)
        return _json({"state": str(state)})

    async def _decide(self, request: web.Request) -> web.StreamResponse:
        caller = request[_CALLER]
        body = await _body(request)
        call_id = _text(body, "call_id")
        approved = body.get("approved")
        if not call_id or not isinstance(approved, bool):
            return _error(400, "a decision is {call_id: string, approved: true|false, reason}")
        run_id = request.match_info["run_id"]
        await self.gateway.decide(caller, run_id, call_id, approved, _text(body, "reason"))
        return _json({"decided": call_id, "approved": approved})

    async def _write(self, response: web.StreamResponse, message: bytes) -> None:
        """Write one message; a page that takes none for ``watcher_stall_s`` is let go (its
        connection closed), as a stalled watcher is."""
        try:
            async with asyncio.timeout(self.config.watching.stall_s):
                await response.write(message)
        except TimeoutError:
            response.force_close()
            raise _Gone from None
        except ConnectionError:  # the page went away mid-write
            raise _Gone from None


class _Gone(Exception):
    """The page of a feed went away, or stopped reading: the feed ends."""


def _head(request: web.Request) -> RequestHead:
    certificate = None
    if request.transport is not None and request.secure:
        certificate = request.transport.get_extra_info("peercert") or None
    return RequestHead(
        method=request.method,
        path=request.path,
        scheme=request.scheme,
        host=request.host,
        headers=request.headers,
        peer=request.remote or "",
        certificate=certificate,
    )


async def _secure(request: web.Request, response: web.StreamResponse) -> None:
    """Every response (errors and streams included) says how a browser must treat it."""
    response.headers.update(SECURITY_HEADERS)
    if request.path.startswith("/api/"):
        response.headers["Cache-Control"] = "no-store"


async def _event_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream; charset=utf-8", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    return response


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise Refusal(400, "the body must be a JSON object") from None
    except web.HTTPRequestEntityTooLarge:
        raise Refusal(413, f"the body must be at most {_MAX_BODY} bytes") from None
    if not isinstance(body, dict):
        raise Refusal(400, "the body must be a JSON object")
    return body


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key, "")
    if not isinstance(value, str):
        raise Refusal(400, f"{key} must be a string")
    return value


def _json(value: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status, text=dumps(value), content_type="application/json", charset="utf-8"
    )


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)
