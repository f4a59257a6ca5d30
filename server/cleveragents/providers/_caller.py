"""What the provider callers share: construction, one ``call``, and checks on the answer.

A subclass says where to POST, which headers carry the key, how the request body looks and,
for streaming, how to assemble the answer from its server-sent events (a
:class:`~cleveragents.providers._assembly.Assembler`); everything format-specific goes
through :class:`~cleveragents.tool.ToolCallRouter`, so the loop itself stays provider-neutral.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

import aiohttp
import structlog

from cleveragents.providers import RESERVED_PARAMS
from cleveragents.providers._assembly import (
    DEFAULT_MAX_ANSWER_CHARS,
    AnswerTooLarge,
    Assembler,
    StreamFailure,
)
from cleveragents.providers._http import Reply, Transport, describe_error, max_body_bytes
from cleveragents.providers._output import strict_problem
from cleveragents.providers._retry import AnswerTooLargeError, ProviderError, RetryPolicy
from cleveragents.providers._stream import MAX_EVENT_BYTES, post_stream
from cleveragents.tool import (
    LLMRequest,
    LLMResponse,
    OutputSchema,
    ResponseDelta,
    ToolCallRouter,
    ToolFormat,
    ToolSpec,
)

__all__ = ["HTTPCaller"]

log = structlog.get_logger("cleveragents.providers")


class HTTPCaller:
    """An ``LLMCaller`` over one provider's HTTP API (see the subclasses).

    ``params`` are generation parameters copied into every request body (``temperature``,
    ``max_tokens``, ``top_p``…). ``client`` is a shared ``aiohttp.ClientSession``; without one
    the caller makes its own on first use and :meth:`aclose` closes it. ``retry`` sets the waits
    between the ``max_retries`` retries. ``stream`` asks for the answer as server-sent events
    and hands each piece to the request's ``deltas`` sink as it arrives; ``strict_tools``
    marks tool schemas ``strict`` (OpenAI's and Anthropic's APIs both take it), so the model's
    arguments always match them. ``max_answer_chars`` bounds a streamed answer: once its
    text, tool-call arguments, ids and names pass that many characters the call fails with
    :class:`~cleveragents.providers.AnswerTooLargeError` (naming ``max_answer_setting``, the
    setting it came from) and the rest of the stream is not read; a whole answer's body is
    read up to six bytes a character of it and 1 MiB more, and no further (the same error).
    """

    provider: ClassVar[str]
    tool_format: ClassVar[ToolFormat]
    default_base_url: ClassVar[str]

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str = "",
        timeout_s: float = 60.0,
        max_retries: int = 2,
        params: Mapping[str, Any] | None = None,
        client: aiohttp.ClientSession | None = None,
        retry: RetryPolicy | None = None,
        profile: str = "",
        stream: bool = False,
        strict_tools: bool = False,
        max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS,
        max_answer_setting: str = "max_answer_chars",
        max_event_bytes: int = MAX_EVENT_BYTES,
    ) -> None:
        if not model:
            raise ValueError(f"{self.provider}: a model name is required")
        api_key = api_key.strip()
        if not all("!" <= ch <= "~" for ch in api_key):
            # Said here, without the key: an HTTP library would quote the bad header value.
            raise ValueError(f"{self.provider}: the API key holds characters a header cannot")
        if max_answer_chars < 1:
            raise ValueError(f"{self.provider}: max_answer_chars must be at least 1")
        #: The largest server-sent event a streamed answer may hold (one more ends the call).
        self.max_event_bytes = max_event_bytes
        params = dict(params or {})
        if reserved := sorted(RESERVED_PARAMS & set(params)):
            raise ValueError(f"{self.provider}: params may not set {', '.join(reserved)}")
        self.model = model
        self.params = params
        self.stream = stream
        self.strict_tools = strict_tools
        self.max_answer_chars = max_answer_chars
        #: The setting the bound comes from, named in the error (the sidecar's own).
        self.max_answer_setting = max_answer_setting
        self.router = ToolCallRouter(self.tool_format)
        #: The output schemas whose non-strict sending was logged (once per caller).
        self._told: set[str] = set()
        #: The last output schema asked for, and whether it meets strict mode's rules: a run
        #: asks with the same one every iteration, checked once.
        self._strict: tuple[OutputSchema, bool] | None = None
        self.url = self.endpoint((base_url or self.default_base_url).rstrip("/"))
        self._headers = {
            "content-type": "application/json",
            "accept": "application/json",
            **self.auth_headers(api_key),
        }
        self._transport = Transport(
            self.provider,
            client=client,
            timeout_s=timeout_s,
            max_retries=max_retries,
            policy=retry or RetryPolicy(),
            secret=api_key,
            # Named in its errors with its endpoint, so that an operator knows which failed.
            where=f"profile {profile!r} at {self.url}" if profile else "",
            max_body=max_body_bytes(max_answer_chars),
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, url={self.url!r})"

    # -- what a subclass provides ------------------------------------------------------------

    def endpoint(self, base_url: str) -> str:
        """The URL requests go to, given the base URL without a trailing slash."""
        raise NotImplementedError

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """The headers that carry the key (and API version, if any)."""
        raise NotImplementedError

    def body(self, request: LLMRequest, tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The request body for this conversation and these provider-format tools."""
        raise NotImplementedError

    def stream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The request body asking for a stream (``stream: true`` and what goes with it)."""
        return {**body, "stream": True}

    def assembler(self, request: LLMRequest) -> Assembler:
        """A fresh assembler of one streamed answer, in this API's event format."""
        raise NotImplementedError

    def parse_body(self, data: dict[str, Any]) -> LLMResponse:
        """A whole answer (the API's JSON object) as an ``LLMResponse``; ``ValueError`` when
        it cannot be used."""
        return self.router.parse_response(data)

    # -- the LLMCaller protocol ----------------------------------------------------------------

    async def call(self, request: LLMRequest) -> LLMResponse:
        """Send the conversation and tools; the model's answer as an ``LLMResponse``.

        Streaming, each piece goes to ``request.deltas`` as it arrives, and the usage last.
        Raises :class:`ProviderError` when the request fails after its retries, when a stream
        breaks after its first event (``retryable``, with ``partial`` set), or when the
        answer cannot be used (no choices, a refusal, output cut off by the token limit…).
        """
        body = self.body(request, self.provider_tools(request.tools))
        if not self.stream:
            reply = await self._transport.post_json(self.url, self._headers, body)
            return self._parse(reply, request.iteration)
        assembler = self.assembler(request)

        def on_events(events: Any) -> bool:
            try:
                return assembler.feed_read(events)
            except StreamFailure as failure:
                raise self._transport.error(
                    f"the provider ended the stream with an error: {describe_error(failure.error)}",
                    status=200,
                    retryable=failure.retryable,
                ) from None
            except AnswerTooLarge as exc:
                message = (
                    f"the streamed answer passed {exc.limit} characters "
                    f"({self.max_answer_setting}) of text, tool-call arguments, ids and names, "
                    "the most it may hold: the rest of the stream was not read"
                )
                where = self._transport.where
                raise AnswerTooLargeError(self.provider, message, status=200, where=where) from None
            except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as exc:
                raise self._transport.error(f"unusable stream event: {exc}", status=200) from None

        try:
            reply = await post_stream(
                self._transport, self.url, self._headers, self.stream_body(body), on_events,
                self.max_event_bytes,
            )  # fmt: skip
        except ProviderError as error:
            if assembler.events:
                error.partial = assembler.partial()
                error.message += f"; what had arrived: {assembler.received()}"
            raise
        if not assembler.complete:  # the server answered with a whole JSON body
            return self._parse(reply, request.iteration)
        response = self._parse(reply._replace(data=assembler.body()), request.iteration)
        if request.deltas is not None and response.usage is not None:
            request.deltas(ResponseDelta(usage=response.usage))
        return response

    async def aclose(self) -> None:
        """Close the HTTP client if this caller created it."""
        await self._transport.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- helpers ---------------------------------------------------------------------------

    def strict_for(self, output: OutputSchema) -> bool:
        """Whether ``output`` goes in OpenAI's strict mode (checked once per schema; why not
        is logged, see :meth:`not_strict`)."""
        known = self._strict
        if known is not None and known[0] is output:
            return known[1]
        strict = self.not_strict(output, strict_problem(output.schema)) is None
        self._strict = (output, strict)
        return strict

    def not_strict(self, output: OutputSchema, problem: str | None) -> str | None:
        """``problem`` (why ``output`` cannot go in strict mode), logged once per caller and
        schema so that an operator learns why the model's answers are not constrained."""
        if problem is not None and output.name not in self._told:
            self._told.add(output.name)
            log.warning(
                "output schema sent without strict mode", output_schema=output.name,
                provider=self.provider, url=self.url, problem=problem,
            )  # fmt: skip
        return problem

    def provider_tools(self, tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Tool schemas in this provider's format.

        A runtime built with ``router=caller.router`` already sends them so; one without a
        router sends ``name``/``description``/``input_schema`` entries, converted here.
        """
        wanted = "function" if self.tool_format is ToolFormat.OPENAI else "input_schema"
        out: list[dict[str, Any]] = []
        for tool in tools:
            if wanted in tool:
                out.append(dict(tool))
                continue
            raw = tool.get("function", tool)
            schema = raw.get("input_schema", raw.get("parameters", {"type": "object"}))
            spec = ToolSpec(str(raw.get("name", "")), str(raw.get("description", "")), schema)
            out.extend(self.router.tool_schemas([spec]))
        return out

    def _parse(self, reply: Reply, iteration: int) -> LLMResponse:
        try:
            response = self.parse_body(reply.data)
        except (ValueError, TypeError, AttributeError) as exc:
            raise ProviderError(
                self.provider,
                f"unusable response: {exc}",
                status=reply.status,
                request_id=reply.request_id,
                where=self._transport.where,
            ) from None
        if all(call.id for call in response.tool_calls):
            return response
        # Some OpenAI-compatible servers omit call ids; results must name the call they answer.
        calls = [
            c if c.id else dataclasses.replace(c, id=f"call_{iteration}_{i}")
            for i, c in enumerate(response.tool_calls, 1)
        ]
        return dataclasses.replace(response, tool_calls=calls)
