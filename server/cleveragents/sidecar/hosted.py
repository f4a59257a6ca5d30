"""Tools and an LLM hosted by a ``Session``'s client, as the run sees them.

The sidecar sends an invocation with an id and waits, never forever: a tool call at most its
timeout (the tool's own, else ``default_tool_timeout_s``), an LLM call
``client_llm_timeout_s``, after which the run fails ``DEADLINE_EXCEEDED`` and frees its slot.
The client owes exactly one answer per id. Answers to ids that timed out are ignored (the
client could not know); answers to ids never sent, or sent twice, are protocol violations
that end the session. The transport reads the answers off the stream and hands them here as
plain values.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import grpc

from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.runs.readers import FrameSink, StreamQueue
from cleveragents.tool import (
    DeltaSink,
    LLMRequest,
    LLMResponse,
    ResponseDelta,
    ToolError,
    ToolRegistry,
    ToolRuntimeError,
    ToolSpec,
    current_call,
)
from cleveragents.wire import (
    LlmAnswer,
    LlmInvocationEncoder,
    Message,
    ToolAnswer,
    parse_json,
    tool_invocation,
)

__all__ = ["ClientHost", "ClientLLMCaller", "ClientToolError"]

_EXPIRED_MEMORY = 4096


class InvocationLog(Protocol):
    """A run's log, which hands a sink an item only after the events logged before it."""

    def push_in_order(self, sink: FrameSink, item: bytes) -> None: ...

    def drop_held(self, sink: FrameSink) -> None: ...


class _Streamed:
    """A client LLM's answer as its deltas spelled it so far, and where they go."""

    __slots__ = ("arguments", "chars", "next_index", "sink", "text")

    def __init__(self, sink: DeltaSink) -> None:
        self.sink = sink
        self.next_index = 0
        #: The characters of text, arguments, ids and names streamed (at most
        #: ``max_message_bytes``).
        self.chars = 0
        self.text: list[str] = []
        self.arguments: dict[int, list[str]] = {}

    def keep(self, delta: ResponseDelta) -> None:
        """Remember what ``delta`` adds to the answer."""
        if delta.tool_call_index is None:
            self.text.append(delta.text)
        else:
            self.arguments.setdefault(delta.tool_call_index, []).append(delta.arguments)

    def mismatch(self, response: LLMResponse) -> str | None:
        """How the deltas streamed differ from ``response``, or ``None`` when they spell it
        (or none were streamed: a client LLM need not stream)."""
        if not self.next_index:
            return None
        if "".join(self.text) != response.content:
            return "text does not match llm_result content"
        calls = response.tool_calls
        for index in sorted(self.arguments.keys() | set(range(len(calls)))):
            if index not in self.arguments:
                return f"arguments of tool call {index} were not streamed"
            if index >= len(calls):
                return f"tool_call_index {index} is not among llm_result's {len(calls)} calls"
            if calls[index].arguments_error:
                continue  # unparsable in the result too: the run records the call as failed
            text = "".join(self.arguments[index]) or "{}"
            try:
                same = json.loads(text) == dict(calls[index].arguments)
            except ValueError:
                same = False
            if not same:
                return f"arguments of tool call {index} do not match llm_result's"
        return None


class ClientToolError(ToolError):
    """The client answered a tool invocation with an error; the record carries its text."""


class ClientHost:
    """What one session's client hosts: its pending invocations, and the ordered outbox of
    frames and invocations to send it."""

    def __init__(
        self,
        default_tool_timeout_s: float,
        incremental_messages: bool = False,
        llm_timeout_s: float = 300.0,
        max_message_bytes: int = 0,
    ) -> None:
        self.outbox = StreamQueue()
        #: The largest invocation one message may carry (0: no limit); a larger one is not
        #: sent, and its call (or LLM turn) fails saying why, instead of the whole stream.
        self.max_message_bytes = max_message_bytes
        #: Whether the client keeps the conversation (each LLM invocation sends only news).
        self.incremental_messages = incremental_messages
        self._deliver: Callable[[bytes], None] = self.outbox.push
        self.default_tool_timeout_s = default_tool_timeout_s
        #: How long an LLM invocation waits for the client's answer.
        self.llm_timeout_s = llm_timeout_s
        self.pending_tools: dict[str, asyncio.Future[ToolAnswer]] = {}
        self.pending_llm: dict[str, asyncio.Future[LlmAnswer]] = {}
        #: Where a pending LLM invocation's streamed deltas go, and what they spelled so far.
        self.llm_deltas: dict[str, _Streamed] = {}
        self._expired: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()
        self.violation: SidecarError | None = None
        #: The invocations sent and not answered yet, by id, as sent: a client that
        #: re-attaches is sent them again.
        self.owed: dict[str, bytes] = {}
        self._prepared: ToolRegistry | None = None

    @property
    def tool_names(self) -> list[str]:
        """The names of the client's tools, as first declared."""
        return [] if self._prepared is None else list(self._prepared.names())

    @property
    def has_pending(self) -> bool:
        """Whether the run waits on the client."""
        return bool(self.pending_tools or self.pending_llm)

    def prepare_tools(
        self,
        specs: Sequence[ToolSpec],
        caps: Sequence[int | None] | None = None,
        pause: Callable[[], None] = lambda: None,
    ) -> None:
        """Build (and compile the schemas of) the proxies of ``specs`` ahead of the run; a
        call of ``specs[i]`` may carry at most ``caps[i]`` JSON values (``None``: any number).

        Safe in a worker thread: compiling schemas is the costly part of opening a session;
        ``pause`` is called between tools there, to let the event loop have the GIL.
        ``ValueError`` names a schema that does not compile.
        """
        prepared = ToolRegistry()
        for spec, cap in zip(specs, caps or [None] * len(specs), strict=True):
            pause()
            prepared.register(spec, self._proxy(spec), max_argument_values=cap)
        self._prepared = prepared

    def register_tools(self, registry: ToolRegistry, specs: Sequence[ToolSpec]) -> None:
        """Add a proxy to ``registry`` for each client-hosted tool (those prepared already
        are added as they are)."""
        prepared = self._prepared
        ready = [] if prepared is None else prepared.specs()
        if (
            prepared is not None
            and len(ready) == len(specs)
            and all(mine is theirs for mine, theirs in zip(ready, specs, strict=True))
        ):
            registry.include(prepared)
            return
        for spec in specs:
            registry.register(spec, self._proxy(spec))

    def resolve_tool(self, answer: ToolAnswer) -> None:
        """Deliver a tool result; raises ``FAILED_PRECONDITION`` for an id not awaited."""
        future = self.pending_tools.pop(answer.call_id, None)
        if future is None:
            if self._late("tool", answer.call_id):
                return
            raise SidecarError.out_of_order(
                f"tool_result for call_id {answer.call_id!r}, which is not awaiting a result "
                "(unknown, or already answered)"
            )
        if not future.done():
            future.set_result(answer)

    def resolve_llm(self, answer: LlmAnswer) -> None:
        """Deliver an LLM result; raises ``FAILED_PRECONDITION`` for an id not awaited, and
        ``INVALID_ARGUMENT`` for one its streamed deltas do not spell."""
        future = self.pending_llm.pop(answer.request_id, None)
        if future is None:
            if self._late("llm", answer.request_id):
                return
            raise SidecarError.out_of_order(
                f"llm_result for request_id {answer.request_id!r}, which is not awaiting a "
                "result (unknown, or already answered)"
            )
        streamed = self.llm_deltas.get(answer.request_id)
        response = answer.response
        if streamed is not None and response is not None and (why := streamed.mismatch(response)):
            raise SidecarError.invalid(
                f"llm_delta {why} for request_id {answer.request_id!r}: an answer's deltas "
                "must spell its llm_result exactly"
            )
        if not future.done():
            future.set_result(answer)

    def stream_llm(self, request_id: str, index: int, delta: ResponseDelta) -> None:
        """Relay piece ``index`` of the client LLM's answer to ``request_id``;
        ``INVALID_ARGUMENT`` for one that answers no pending invocation or comes out of
        order."""
        entry = self.llm_deltas.get(request_id)
        if entry is None:
            if (request_id in self.pending_llm) or ("llm", request_id) in self._expired:
                return  # not streamed to anyone, or late: dropped like its answer
            raise SidecarError.invalid(
                f"llm_delta for request_id {request_id!r}, which is not awaiting an answer "
                "(unknown, or already answered)"
            )
        if index != entry.next_index:
            raise SidecarError.invalid(
                f"llm_delta index {index} for request_id {request_id!r}, expected "
                f"{entry.next_index}: number an answer's deltas 0, 1, 2… in the order sent"
            )
        if delta.tool_call_index is not None and delta.tool_call_index < 0:
            raise SidecarError.invalid(
                f"llm_delta {index} for request_id {request_id!r} has tool_call_index "
                f"{delta.tool_call_index}; tool calls are numbered from 0"
            )
        entry.next_index += 1
        # Every character a delta carries is kept (and relayed) until the answer comes, ids and
        # names as much as text: all count toward what its llm_result may carry.
        entry.chars += (
            len(delta.text) + len(delta.arguments) + len(delta.tool_call_id) + len(delta.tool_name)
        )
        limit = self.max_message_bytes
        if limit and entry.chars > limit:
            self._overflow(request_id, f"llm_delta {index} for request_id {request_id!r} "
                f"takes the answer's streamed text, arguments, tool call ids and names to "
                f"{entry.chars} characters, more than the {limit} bytes its llm_result may "
                "carry (the sidecar's max_message_bytes): the deltas of one answer must spell "
                "that answer, which has to fit in one message")  # fmt: skip
            return
        entry.keep(delta)
        entry.sink(delta)

    def _overflow(self, request_id: str, why: str) -> None:
        """Fail the LLM call ``request_id`` with ``RESOURCE_EXHAUSTED``: its streamed deltas
        outgrew what its answer may be; the rest of them, and its answer, are dropped."""
        future = self.pending_llm.pop(request_id, None)
        self.llm_deltas.pop(request_id, None)
        self.owed.pop(request_id, None)
        self.forget("llm", request_id)
        if future is not None and not future.done():
            future.set_exception(SidecarError.quota(why))

    def attach(self, log: InvocationLog) -> None:
        """Deliver messages through the run's ``log``, after the events logged before them."""
        self._deliver = functools.partial(log.push_in_order, self.outbox)

    def rebind(self, log: InvocationLog, frames: Sequence[bytes]) -> None:
        """A client re-attached: its outbox gets ``frames`` (the events it missed), then
        every invocation still owed, in the order sent, after the events logged before."""
        self.outbox.clear()
        log.drop_held(self.outbox)
        for item in frames:
            self.outbox.push(item)
        for invocation in self.owed.values():
            self.send(invocation)

    def send(self, response: bytes) -> None:
        """Queue a serialised ``SessionResponse`` for the client, after every event logged
        before it."""
        self._deliver(Message(response))

    def too_large(self, response: bytes, what: str) -> str | None:
        """Why ``response`` (an invocation for ``what``) cannot be sent, or ``None`` if it can."""
        limit = self.max_message_bytes
        if not limit or len(response) <= limit:
            return None
        return (
            f"{what} is {len(response)} bytes, more than the {limit} bytes one message to the "
            f"client may carry (the sidecar's max_message_bytes, less room for the message)"
        )

    def _late(self, kind: str, key: str) -> bool:
        """Whether ``key`` is a ``kind`` invocation that timed out (its answer, once, is late)."""
        if (kind, key) not in self._expired:
            return False
        del self._expired[(kind, key)]
        return True

    def forget(self, kind: str, key: str) -> None:
        """Remember that the ``kind`` ("tool" or "llm") invocation ``key`` timed out, so that
        its late answer is ignored."""
        self._expired[(kind, key)] = None
        while len(self._expired) > _EXPIRED_MEMORY:
            self._expired.popitem(last=False)

    def _proxy(self, spec: ToolSpec) -> Any:
        what = f"the invocation of {spec.name!r}"  # once per tool, not per call

        async def invoke(inputs: Mapping[str, Any]) -> Any:
            scope = current_call()
            if scope is None:  # pragma: no cover - only the runner calls handlers
                raise ToolRuntimeError("client tools run only inside the tool loop")
            call_id = scope.call.id
            if call_id in self.pending_tools:
                raise ToolRuntimeError(
                    f"call id {call_id!r} is already awaiting the client; the model reused an id"
                )
            timeout_s = scope.timeout_s or self.default_tool_timeout_s
            invocation = tool_invocation(
                call_id, spec.name, inputs, scope.iteration, time.time() + timeout_s,
                scope.idempotency_key,
            )  # fmt: skip
            if (why := self.too_large(invocation, what)) is not None:
                raise ToolRuntimeError(f"{why}: it was not sent")
            future: asyncio.Future[ToolAnswer] = asyncio.get_running_loop().create_future()
            self.pending_tools[call_id] = future
            self.owed[call_id] = invocation
            self.send(invocation)
            try:
                answer = await future
            finally:
                self.owed.pop(call_id, None)
                if self.pending_tools.get(call_id) is future:
                    del self.pending_tools[call_id]
                    self.forget("tool", call_id)
            if answer.error is not None:
                raise ClientToolError(answer.error)
            if not answer.output.strip():
                return {}
            # Any JSON value: the runner wraps a non-object x as {"result": x}.
            return parse_json(answer.output, f"output of {spec.name!r}")

        return invoke


class ClientLLMCaller:
    """An ``LLMCaller`` whose answers come from the client over the session."""

    def __init__(self, host: ClientHost) -> None:
        self._host = host
        self._encoder = LlmInvocationEncoder(incremental=host.incremental_messages)

    async def call(self, request: LLMRequest) -> LLMResponse:
        """Send the conversation to the client and wait for its answer."""
        request_id = f"llm_{request.iteration}"
        timeout_s = self._host.llm_timeout_s
        invocation = self._encoder.encode(request_id, request, time.time() + timeout_s)
        why = self._host.too_large(
            invocation, f"the LLM invocation of iteration {request.iteration}"
        )
        if why is not None:
            raise SidecarError(grpc.StatusCode.RESOURCE_EXHAUSTED, why)
        future: asyncio.Future[LlmAnswer] = asyncio.get_running_loop().create_future()
        self._host.pending_llm[request_id] = future
        if request.deltas is not None:
            self._host.llm_deltas[request_id] = _Streamed(request.deltas)
        self._host.owed[request_id] = invocation
        self._host.send(invocation)
        try:
            async with asyncio.timeout(timeout_s):
                answer = await future
        except TimeoutError:
            raise SidecarError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"the client did not answer LLM invocation {request_id!r} within "
                f"{timeout_s:g}s (client_llm_timeout_s)",
            ) from None
        finally:
            self._host.owed.pop(request_id, None)
            self._host.pending_llm.pop(request_id, None)
            self._host.llm_deltas.pop(request_id, None)
            if future.cancelled() or not future.done():  # unanswered: a late answer is ignored once
                self._host.forget("llm", request_id)
        if answer.response is None:
            raise SidecarError(
                grpc.StatusCode.UNAVAILABLE, f"the client's LLM failed: {answer.error}"
            )
        return answer.response
