"""A session as the client sees it, without I/O: one logic for both Python clients.

``SessionLogic`` says what to send first, what each response carries (events to hand out,
work to do) and what each piece of work answers. The asyncio client does the work in tasks,
concurrently; the blocking client does it in its own thread, one piece at a time.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import inspect
import queue
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from cleveragents.client.deadlines import Deadlines
from cleveragents.client.eager import cannot_suspend
from cleveragents.client.exchange import EventDecoder, Tools, as_registry, describe, run_request
from cleveragents.client.output import OutputType
from cleveragents.client.types import StreamedEvent
from cleveragents.tool import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    LLMCaller,
    LLMResponse,
    ResponseDelta,
    ToolRunner,
)
from cleveragents.tool.frozen import quick_init
from cleveragents.toolruntime.v1 import session_pb2
from cleveragents.wire import (
    Conversation,
    SessionOpening,
    approval_request,
    events_of,
    join_delta_requests,
    llm_delta_request,
    llm_deltas_request,
    llm_result_request,
    parse_json_object,
    session_start_to_pb,
    tool_result_request,
)

__all__ = [
    "LEAVING",
    "MAX_DELTAS_A_MESSAGE",
    "ApprovalJob",
    "Job",
    "LlmJob",
    "SessionApprover",
    "SessionLogic",
    "ToolJob",
]

#: What a client that leaves its session early sends: the run is cancelled, not left waiting
#: for a re-attach.
LEAVING = session_pb2.SessionRequest(
    cancel=session_pb2.SessionCancel(reason="the client went away")
)
#: The answers a session remembers, to send again when a re-attached stream asks again.
_ANSWERS_KEPT = 1024
#: Waits between re-attach attempts: from a blink to a second.
_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
#: The most deltas one message carries when an LLM streams faster than they are written.
MAX_DELTAS_A_MESSAGE = 256
#: No message taken ahead (``None`` in a session's queue ends its stream).
_NOTHING = object()
#: The details of the status gRPC gives a call whose write failed on a broken connection.
_CORE_SEND_FAILED = "Internal error from Core"

#: Decides an approval request in a session: ``True``/``False``, or an ``ApprovalDecision``
#: (for a reason), returned directly or awaited.
SessionApprover = Callable[[ApprovalRequest], Any]
#: Sends one message of the session at once (awaited if it returns an awaitable).
Sender = Callable[[session_pb2.SessionRequest], "Awaitable[None] | None"]


@quick_init
@dataclass(frozen=True, slots=True)
class ToolJob:
    """Run one of the client's tools for the sidecar; ``key`` is the id its answer answers."""

    invocation: session_pb2.ToolInvocation
    key: str


@quick_init
@dataclass(frozen=True, slots=True)
class LlmJob:
    """Ask the client's LLM for the sidecar; ``key`` is the id its answer answers."""

    invocation: session_pb2.LlmInvocation
    key: str


@quick_init
@dataclass(frozen=True, slots=True)
class ApprovalJob:
    """Decide a tool call that waits for approval; ``key`` is the id its answer answers."""

    event: ApprovalRequested
    key: str


Job = ToolJob | LlmJob | ApprovalJob


class SessionLogic:
    """One session's client side: its tools, its LLM and approver, its conversation."""

    def __init__(
        self,
        prompt: str,
        *,
        tools: Tools,
        llm: LLMCaller | None,
        approver: SessionApprover | None,
        options: dict[str, Any],
        stream_deltas: bool = False,
        output_type: OutputType[Any] | None = None,
    ) -> None:
        registry = as_registry(tools)
        self.runner = ToolRunner(registry)
        self.llm = llm
        self.approver = approver
        self.conversation = Conversation()
        self.decode = EventDecoder(output_type)
        #: The deadlines of the calls under way: one timer, armed only while a call waits.
        self.deadlines = Deadlines()
        #: The tools whose calls run straight through (``cannot_suspend``): worth doing inline.
        self.instant_tools = frozenset(
            spec.name
            for spec in registry.specs()
            if (entry := registry.get(spec.name)) is not None and cannot_suspend(entry.handler)
        )
        #: Where the run's log stands for this client: its id and the last sequence seen.
        self.run_id = str(options.get("run_id") or "")
        self.last_sequence = 0
        #: Answers sent, by call or request id: a re-attached stream is sent the invocations
        #: still owed, and one answered already (the answer lost with the old stream) is
        #: answered again without running the tool twice.
        self.answers: collections.OrderedDict[str, session_pb2.SessionRequest] = (
            collections.OrderedDict()
        )
        #: Ids whose work is under way (an invocation sent again does not start it twice).
        self.working: set[str] = set()
        #: The LLM invocations whose deltas the sidecar takes several to a message.
        self.delta_batches: set[str] = set()
        self.start = session_start_to_pb(
            SessionOpening(
                run_request(prompt, output_type=output_type, **options),
                tuple(registry.specs()),
                client_llm=llm is not None,
                handles_approvals=approver is not None,
                batch_events=True,
                incremental_messages=llm is not None,
            )
        )
        self.start.start.stream_deltas = stream_deltas

    def invocation(self, response: session_pb2.SessionResponse) -> Job | None:
        """The work a response's invocation asks for, if it carries one (and it is not under
        way already, or answered: see ``answered``)."""
        kind = response.WhichOneof("kind")
        job: Job
        if kind == "tool_invocation":
            tool = response.tool_invocation
            job = ToolJob(tool, "tool:" + tool.call_id)
        elif kind == "llm_invocation" and self.llm is not None:
            llm = response.llm_invocation
            job = LlmJob(llm, "llm:" + llm.request_id)
        else:
            return None
        if job.key in self.working:
            return None
        return job

    def instant(self, job: Job) -> bool:
        """Whether ``job`` is a call of one of the ``instant_tools``."""
        return isinstance(job, ToolJob) and job.invocation.tool_name in self.instant_tools

    def answered(self, job: Job) -> session_pb2.SessionRequest | None:
        """The answer already given to ``job``'s id, if any (sent again, not redone)."""
        return self.answers.get(job.key)

    def remember(self, job: Job, answer: session_pb2.SessionRequest) -> None:
        """Keep ``answer`` to ``job`` for a re-attached stream that asks again."""
        self.answers[job.key] = answer
        while len(self.answers) > _ANSWERS_KEPT:
            self.answers.popitem(last=False)

    def reattach_start(self) -> session_pb2.SessionRequest:
        """The first message of a stream that re-attaches to the run after what was seen."""
        message = session_pb2.SessionRequest()
        message.CopyFrom(self.start)
        message.start.reattach_run_id = self.run_id
        message.start.after_sequence = self.last_sequence
        return message

    def retry_after(self, code: grpc.StatusCode, details: str, attempt: int) -> float | None:
        """Seconds to wait before re-attaching after a stream ended with ``code`` (attempt
        ``attempt``, from 0), or ``None`` if re-attaching cannot help."""
        if not self.run_id:  # not one event seen: the run may not even exist
            return None
        lost = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        # An answer written just as the connection dropped: gRPC's own failure to send,
        # which it reports as the call's status (the sidecar's INTERNAL says more).
        lost = lost or (code is grpc.StatusCode.INTERNAL and details.endswith(_CORE_SEND_FAILED))
        # The sidecar may not have noticed yet that the old stream is gone.
        held = code is grpc.StatusCode.FAILED_PRECONDITION and "not waiting" in details
        if not (lost or held):
            return None
        return _BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)]

    def events(
        self, response: session_pb2.SessionResponse
    ) -> Iterator[tuple[StreamedEvent, Job | None]]:
        """Each event a response carries (they come before its invocation), with the
        approval it asks this client for, if any."""
        decode, approves = self.decode, self.approver is not None
        for event in events_of(response):
            streamed = decode(event)
            self.run_id, self.last_sequence = streamed.run_id, streamed.sequence
            if approves and isinstance(streamed.event, ApprovalRequested):
                yield streamed, ApprovalJob(streamed.event, "approval:" + streamed.event.call_id)
            else:
                yield streamed, None

    async def answer(
        self, job: Job, send: Sender | None = None, *, threadsafe: bool = False
    ) -> session_pb2.SessionRequest:
        """Do ``job`` and return the message that answers it; failures become answers too.

        ``send`` sends the deltas a streaming LLM puts in its request's ``deltas`` sink as
        they come, before the answer (without it they are not sent). A ``threadsafe`` send
        (a plain function that may be called from any thread) is called straight from the
        sink, in whatever thread the LLM streams; any other is called on this event loop.
        """
        return await self.bounded(job, self.work(job, send, threadsafe=threadsafe))

    def work(
        self, job: Job, send: Sender | None = None, *, threadsafe: bool = False
    ) -> Coroutine[Any, Any, session_pb2.SessionRequest]:
        """``job``'s work, unbounded by its deadline (``bounded`` adds it): a coroutine that
        may be started at once and finished elsewhere (as ``answer``, which both are)."""
        if isinstance(job, ToolJob):
            return self._run_tool(job.invocation)
        if isinstance(job, LlmJob):
            if job.invocation.accepts_delta_batches:
                self.delta_batches.add(job.invocation.request_id)
            if send is None:
                return self._ask_llm(job.invocation, None)
            if threadsafe:
                return self._ask_llm(job.invocation, _direct(job.invocation, send))
            return self._streaming(job.invocation, send)
        return self._decide(job.event)

    async def bounded(
        self, job: Job, work: Awaitable[session_pb2.SessionRequest]
    ) -> session_pb2.SessionRequest:
        """``work``'s answer to ``job``, or, past the sidecar's deadline for it (which only
        work that waits can reach), the answer saying the deadline passed."""
        if isinstance(job, ApprovalJob):
            return await work
        invocation = job.invocation
        try:
            return await self.deadlines.within(work, _deadline_of(invocation))
        except TimeoutError:
            if isinstance(invocation, session_pb2.ToolInvocation):
                call_id = invocation.call_id
                return tool_result_request(call_id, None, _PASSED.format("call", call_id))
            request_id = invocation.request_id
            return llm_result_request(request_id, None, _PASSED.format("request", request_id))

    async def _run_tool(self, invocation: session_pb2.ToolInvocation) -> session_pb2.SessionRequest:
        try:
            inputs = parse_json_object(invocation.inputs, "inputs")
            output = await self.runner.invoke(invocation.tool_name, inputs)
        except Exception as exc:
            return tool_result_request(invocation.call_id, None, describe(exc))
        return tool_result_request(invocation.call_id, output, None)

    def joins(
        self, message: session_pb2.SessionRequest, previous: session_pb2.SessionRequest
    ) -> bool:
        """Whether ``message`` may go in one message with ``previous``: both ``llm_delta``s
        of one answer whose invocation ``accepts_delta_batches``."""
        return (
            message.WhichOneof("kind") == "llm_delta"
            and previous.WhichOneof("kind") == "llm_delta"
            and message.llm_delta.request_id == previous.llm_delta.request_id
            and message.llm_delta.request_id in self.delta_batches
        )

    def requests(
        self, outgoing: queue.SimpleQueue[session_pb2.SessionRequest | None]
    ) -> Iterator[session_pb2.SessionRequest]:
        """The messages queued in ``outgoing`` up to ``None``, in order, as a blocking writer
        takes them: the deltas of one answer queued while it wrote the last message go in one
        (``joins``), up to ``MAX_DELTAS_A_MESSAGE``."""
        message = outgoing.get()
        while message is not None:
            run: list[session_pb2.SessionRequest] = [message]
            after: session_pb2.SessionRequest | object | None = _NOTHING
            while len(run) < MAX_DELTAS_A_MESSAGE:
                try:
                    taken = outgoing.get_nowait()
                except queue.Empty:
                    break
                if taken is None or not self.joins(taken, run[-1]):
                    after = taken
                    break
                run.append(taken)
            yield join_delta_requests(run)
            message = outgoing.get() if after is _NOTHING else after  # type: ignore[assignment]

    async def _streaming(
        self, invocation: session_pb2.LlmInvocation, send: Sender
    ) -> session_pb2.SessionRequest:
        """Ask the LLM, sending the deltas it streams (in order) while it answers: each as it
        comes, or, to a sidecar that takes them so, those that came while the last message
        was being written, together in the next."""
        queue: asyncio.Queue[ResponseDelta | None] = asyncio.Queue()
        most = MAX_DELTAS_A_MESSAGE if invocation.accepts_delta_batches else 1

        async def pump() -> None:
            index, ended = 0, False
            while not ended and (delta := await queue.get()) is not None:
                taken = [delta] if isinstance(delta, ResponseDelta) else []
                while len(taken) < most and not queue.empty():
                    more = queue.get_nowait()
                    if more is None:
                        ended = True
                        break
                    if isinstance(more, ResponseDelta):
                        taken.append(more)
                if not taken:
                    continue
                sent = send(llm_deltas_request(invocation.request_id, index, taken))
                if inspect.isawaitable(sent):
                    await sent
                index += len(taken)

        loop, here = asyncio.get_running_loop(), threading.get_ident()

        def sink(delta: ResponseDelta) -> None:
            if threading.get_ident() == here:
                queue.put_nowait(delta)
            else:  # an LLM streaming from a worker thread: the pump is woken on its loop
                with contextlib.suppress(RuntimeError):  # the loop is gone: nobody to tell
                    loop.call_soon_threadsafe(queue.put_nowait, delta)

        async with asyncio.TaskGroup() as group:
            group.create_task(pump())
            try:
                return await self._ask_llm(invocation, sink)
            finally:
                # After the deltas scheduled before the LLM returned: the pump sends them,
                # then ends.
                queue.put_nowait(None)

    async def _ask_llm(
        self,
        invocation: session_pb2.LlmInvocation,
        deltas: Callable[[ResponseDelta], None] | None,
    ) -> session_pb2.SessionRequest:
        assert self.llm is not None
        try:
            request = self.conversation.request(invocation)
            if deltas is not None:
                request = dataclasses.replace(request, deltas=deltas)
            response: Any
            if inspect.iscoroutinefunction(self.llm.call):
                response = self.llm.call(request)
            else:  # a blocking call runs in a thread: the loop goes on sending its deltas
                response = await asyncio.to_thread(self.llm.call, request)
            if inspect.isawaitable(response):
                response = await response
            if not isinstance(response, LLMResponse):
                raise TypeError(f"the LLM caller returned {type(response).__name__}")
            # Built here so that an answer the wire cannot carry (NaN in arguments, a lone
            # surrogate in text) fails the run with a message, not this client's session.
            return llm_result_request(invocation.request_id, response, None)
        except Exception as exc:
            return llm_result_request(invocation.request_id, None, describe(exc))

    async def _decide(self, event: ApprovalRequested) -> session_pb2.SessionRequest:
        assert self.approver is not None
        request = ApprovalRequest(
            event.call_id, event.tool_name, event.inputs, event.iteration, event.reason
        )
        try:
            answer = self.approver(request)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:
            answer = ApprovalDecision(False, f"the approver failed: {describe(exc)}")
        if isinstance(answer, ApprovalDecision):
            return approval_request(event.call_id, answer.approved, answer.reason)
        return approval_request(event.call_id, answer is True, "")


#: The answer to an invocation whose deadline passed (the sidecar has stopped waiting for it).
_PASSED = "stopped: the sidecar's deadline for {} {} passed"


def _deadline_of(
    invocation: session_pb2.ToolInvocation | session_pb2.LlmInvocation,
) -> float | None:
    """When (wall-clock seconds) the sidecar stops waiting for ``invocation`` (``None``: never).

    The work is cancelled then: an async tool or LLM stops, and a session reading its
    invocations one at a time (the sync client's) goes on; a blocking one's thread runs on.
    """
    if not invocation.HasField("deadline"):
        return None
    deadline = invocation.deadline
    return deadline.seconds + deadline.nanos / 1e9


def _direct(invocation: session_pb2.LlmInvocation, send: Sender) -> Callable[[ResponseDelta], None]:
    """A sink that sends each delta of ``invocation`` at once through the thread-safe
    ``send``, numbered in order whichever thread streams it."""
    lock, index = threading.Lock(), 0

    def sink(delta: ResponseDelta) -> None:
        nonlocal index
        with lock:
            send(llm_delta_request(invocation.request_id, index, delta))
            index += 1

    return sink
