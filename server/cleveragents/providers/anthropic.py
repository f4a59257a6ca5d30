"""``AnthropicMessagesCaller``: the Anthropic Messages API.

``POST {base_url}/v1/messages`` with ``tools`` (``input_schema`` entries), system messages
lifted into the top-level ``system`` field, ``tool_use`` blocks in assistant turns and
``tool_result`` blocks (``is_error`` on failures) in user turns, the key in ``x-api-key`` and
the API version in ``anthropic-version``. ``max_tokens`` is required by the API: it defaults
to :data:`DEFAULT_MAX_TOKENS` unless the generation parameters set it.

Streaming reads the Messages events: ``message_start`` (the usage of the prompt),
``content_block_start`` (a ``text`` or ``tool_use`` block), ``content_block_delta``
(``text_delta``, ``input_json_delta``), ``content_block_stop``, ``message_delta`` (the stop
reason and output usage) and ``message_stop``; ``ping`` is skipped and ``error`` ends the call.
With ``strict_tools`` each tool goes with ``strict: true`` (Anthropic's strict tool use,
generally available without a beta header): the model's ``input`` then always matches the
schema, which must suit strict mode (``additionalProperties: false`` on every object, as the
registry's schemas have). With ``cache_prompt`` the system prompt, the tools and the
conversation so far are marked ``cache_control: ephemeral``, so that each iteration of a loop
reads the prefix that the previous one wrote to Anthropic's prompt cache instead of paying for
it again.

A run with an output schema is asked, as ``structured_output`` says (default ``auto``), with
``output_config.format`` (``json_schema``: Anthropic's structured outputs, on Claude 4.5 and
later, the schema adjusted as ``_output.py`` says) or with a forced answer tool whose input is
the schema (``tool_choice`` ``any`` beside the run's tools, the answer tool itself when it has
none, ``auto`` when thinking is on, which refuses a forced choice). The answer tool's input
becomes the answer's text, and streams as text deltas; an answer given that way ends the
answer: the response's other blocks are left out. A ``refusal`` stop reason ends the run with
the refusal's text.
"""

from __future__ import annotations

from typing import Any

from cleveragents.providers._assembly import DEFAULT_MAX_ANSWER_CHARS, Assembler, StreamFailure
from cleveragents.providers._caller import HTTPCaller
from cleveragents.providers._output import (
    answer_tool,
    answer_tool_name,
    anthropic_has_structured_outputs,
    anthropic_schema,
)
from cleveragents.tool import DeltaSink, LLMRequest, LLMResponse, OutputSchema, ToolFormat
from cleveragents.tool.jsontext import Encoder

__all__ = [
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_VERSION",
    "DEFAULT_MAX_TOKENS",
    "AnthropicMessagesCaller",
]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
#: Parameters the API accepts only beside ``tools``: ``tool_choice`` (which also carries
#: ``disable_parallel_tool_use``) is refused (400) in a request without tools.
_TOOL_PARAMS = ("tool_choice",)
_EPHEMERAL = {"type": "ephemeral"}
_compact = Encoder(separators=(",", ":"))


class AnthropicMessagesCaller(HTTPCaller):
    """An ``LLMCaller`` for Anthropic Messages.

    A request that offers no tools leaves out the profile's ``tool_choice``, which the API
    refuses then. ``cache_prompt`` adds prompt-caching breakpoints (see the module docstring).
    """

    def __init__(
        self,
        model: str,
        *,
        cache_prompt: bool = False,
        structured_output: str = "auto",
        **kwargs: Any,
    ) -> None:
        super().__init__(model, **kwargs)
        if structured_output not in ("auto", "native", "tool"):
            raise ValueError(
                f"structured_output must be auto, native or tool, not {structured_output!r}"
            )
        self.cache_prompt = cache_prompt
        self.structured_output = structured_output
        #: The answer tool's name of the request being answered ("": no answer tool).
        self._answer_tool = ""
        #: The last output schema asked for and its native form (``None``: the answer tool).
        self._native: tuple[OutputSchema, dict[str, Any] | None] | None = None

    provider = "anthropic"
    tool_format = ToolFormat.ANTHROPIC
    default_base_url = ANTHROPIC_BASE_URL

    def endpoint(self, base_url: str) -> str:
        return f"{base_url}/v1/messages"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def provider_tools(self, tools: Any) -> list[dict[str, Any]]:
        out = super().provider_tools(tools)
        if self.strict_tools:
            out = [{**t, "strict": True} for t in out]
        return out

    def body(self, request: LLMRequest, tools: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "max_tokens": DEFAULT_MAX_TOKENS}
        body.update(self.params)
        body.update(self.router.format_messages(request.messages))
        self._answer_tool = ""
        if request.output is not None:
            tools = self._ask_for_output(body, request.output, tools)
        if tools:
            body["tools"] = tools
        else:
            for key in _TOOL_PARAMS:
                body.pop(key, None)
        if self.cache_prompt:
            _mark_cache_breakpoints(body)
        return body

    def native_schema(self, output: OutputSchema) -> dict[str, Any] | None:
        """The schema ``output_config.format`` gets, or ``None`` when the answer tool asks
        instead (the profile says so, the model has no structured outputs, or the schema
        cannot go that way)."""
        if self.structured_output == "tool":
            return None
        if self.structured_output == "auto" and not anthropic_has_structured_outputs(self.model):
            return None
        known = self._native
        if known is not None and known[0] is output:
            return known[1]
        schema = anthropic_schema(output.schema)
        if schema is None:
            self.not_strict(output, "it is recursive or has open keys (a map)")
        self._native = (output, schema)
        return schema

    def _ask_for_output(
        self, body: dict[str, Any], output: OutputSchema, tools: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        schema = self.native_schema(output)
        if schema is not None:
            config = body.get("output_config")
            config = dict(config) if isinstance(config, dict) else {}
            config["format"] = {"type": "json_schema", "schema": schema}
            body["output_config"] = config
            return tools
        name = self._answer_tool = answer_tool_name(tools)
        thinking = body.get("thinking")
        if isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled"):
            body["tool_choice"] = {"type": "auto"}  # thinking refuses a forced tool choice
        elif tools:
            body["tool_choice"] = {"type": "any"}
        else:
            body["tool_choice"] = {"type": "tool", "name": name}
        return [*tools, answer_tool(output, name)]

    def assembler(self, request: LLMRequest) -> Assembler:
        return MessageStream(
            request.deltas, request.iteration, self.max_answer_chars, self._answer_tool
        )

    def parse_body(self, data: dict[str, Any]) -> LLMResponse:
        if self._answer_tool:
            data = with_answer_as_text(data, self._answer_tool)
        return super().parse_body(data)


def with_answer_as_text(data: dict[str, Any], tool: str) -> dict[str, Any]:
    """A message whose ``tool`` call is the answer: that call's input as its only block, a
    text block (streamed, the input is its JSON text already); as it is otherwise."""
    blocks = data.get("content")
    if not isinstance(blocks, list):
        return data
    for block in blocks:
        if (
            isinstance(block, dict)
            and block.get("type") == "tool_use"
            and block.get("name") == tool
        ):
            given = block.get("input")
            text = given if isinstance(given, str) else _compact(given if given is not None else {})
            return {**data, "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}
    return data


def _mark_cache_breakpoints(body: dict[str, Any]) -> None:
    """``cache_control`` on the system prompt, the last tool and the last block of the
    conversation: three of the four breakpoints the API allows, each caching all before it."""
    if isinstance(body.get("system"), str):
        body["system"] = [{"type": "text", "text": body["system"], "cache_control": _EPHEMERAL}]
    if body.get("tools"):
        body["tools"] = [*body["tools"][:-1], {**body["tools"][-1], "cache_control": _EPHEMERAL}]
    messages = body.get("messages") or []
    if messages and isinstance(messages[-1].get("content"), list) and messages[-1]["content"]:
        last = messages[-1]
        blocks = [*last["content"][:-1], {**last["content"][-1], "cache_control": _EPHEMERAL}]
        messages[-1] = {**last, "content": blocks}


class MessageStream(Assembler):
    """Assembles a streamed message from the Messages API's events."""

    def __init__(
        self,
        sink: DeltaSink | None,
        iteration: int,
        max_chars: int = DEFAULT_MAX_ANSWER_CHARS,
        answer_tool: str = "",
    ) -> None:
        super().__init__(sink, iteration, max_chars)
        #: The answer tool's name: its input streams as the answer's text ("": none).
        self._answer_tool = answer_tool
        self._answer: int | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        #: Each text block's fragments, joined once in ``body`` (not re-copied per delta).
        self._texts: dict[int, list[str]] = {}
        self._message: dict[str, Any] = {}
        self._usage: dict[str, Any] = {}

    def handle(self, event: str, data: dict[str, Any]) -> bool:
        kind = str(data.get("type", event))
        if kind == "error":
            raise StreamFailure(data.get("error") or data)
        if kind in ("message_start", "message_delta"):
            self.keep_event()  # their fields are kept as they came
        if kind == "message_start":
            self._message = dict(data.get("message") or {})
            self._usage.update(self._message.get("usage") or {})
        elif kind == "content_block_start":
            self._start_block(int(data["index"]), data.get("content_block") or {})
        elif kind == "content_block_delta":
            self._delta(int(data["index"]), data.get("delta") or {})
        elif kind == "message_delta":
            self._message.update(data.get("delta") or {})
            self._usage.update(data.get("usage") or {})
        return kind == "message_stop"

    def _start_block(self, index: int, block: dict[str, Any]) -> None:
        block = dict(block)
        if (
            self._answer_tool
            and block.get("type") == "tool_use"
            and block.get("name") == self._answer_tool
        ):  # the answer: its input's JSON streams as the answer's text
            self._answer = index
            self._texts[index] = []
            self._blocks[index] = {"type": "text", "text": ""}
            return
        if block.get("type") != "text":  # kept whole (a tool_use block's input, a thinking one)
            self.keep_event()
        if block.get("type") == "tool_use":
            block["position"] = self.start_call(block.get("id"), block.get("name"))
            block["id"] = self.calls[block["position"]].id
        elif block.get("type") == "text":
            self.add_text(block.get("text"))
            self._texts[index] = [str(block.get("text") or "")]
        self._blocks[index] = block

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self._blocks[index]
        kind = delta.get("type")
        if kind == "text_delta" and block.get("type") == "text":
            self.add_text(delta.get("text"))
            self._texts[index].append(str(delta.get("text") or ""))
        elif kind == "input_json_delta" and index == self._answer:
            self.add_text(delta.get("partial_json"))
            self._texts[index].append(str(delta.get("partial_json") or ""))
        elif kind == "input_json_delta" and "position" in block:
            self.add_arguments(block["position"], delta.get("partial_json"))
        # thinking_delta, signature_delta, citations_delta: not part of the answer's text

    def body(self) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if self._answer is not None:  # the answer's text alone, as a whole answer gives it
            text = "".join(self._texts[self._answer])
            content = [{"type": "text", "text": text}]
            return {**self._message, "stop_reason": "end_turn", "content": content,
                    "usage": self._usage}  # fmt: skip
        for index, block in sorted(self._blocks.items()):
            if index in self._texts:
                content.append({**block, "text": "".join(self._texts[index])})
            elif "position" in block:
                call = self.calls[block["position"]]
                content.append(
                    {"type": "tool_use", "id": call.id, "name": call.name,
                     "input": call.arguments_text or dict(block.get("input") or {})}
                )  # fmt: skip
            else:
                content.append(block)
        return {**self._message, "content": content, "usage": self._usage}
