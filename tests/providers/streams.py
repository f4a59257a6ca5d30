"""Server-sent event streams byte for byte as the APIs send them.

Shapes from the vendors' API references for streaming (OpenAI Chat Completions with
``stream_options.include_usage``, Anthropic Messages, OpenAI Responses): compact JSON, the
fields each event really carries (``usage: null`` on every chat chunk, ``ping`` events,
``sequence_number``), keep-alive comments as proxies such as OpenRouter send them, and text
with multi-byte UTF-8 characters so that splits can fall inside one.
"""

from __future__ import annotations

import json
from typing import Any


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
    choices = [] if delta is None else [
        {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    ]  # fmt: skip
    body = {
        "id": "chatcmpl-Aq7k2b",
        "object": "chat.completion.chunk",
        "created": 1733000000,
        "model": "gpt-4o-mini-2024-07-18",
        "service_tier": "default",
        "system_fingerprint": "fp_0aa8d3e20b",
        "choices": choices,
        "usage": None,
        **extra,
    }
    return (
        b"data: " + json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"
    )


#: Text only, with a keep-alive comment, then the usage chunk and [DONE].
OPENAI_TEXT = (
    _chunk({"role": "assistant", "content": "", "refusal": None})
    + b": OPENROUTER PROCESSING\n\n"
    + _chunk({"content": "Caf\u00e9 "})
    + _chunk({"content": "\U0001f642 ok"})
    + _chunk({}, "stop")
    + _chunk(
        None,
        usage={
            "prompt_tokens": 19,
            "completion_tokens": 4,
            "total_tokens": 23,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
    )
    + b"data: [DONE]\n\n"
)
OPENAI_TEXT_CONTENT = "Caf\u00e9 \U0001f642 ok"

#: The same text as a small OpenAI-compatible server streams it (only the fields it must
#: send), small enough to be split at every byte.
OPENAI_SMALL = (
    'data: {"choices":[{"index":0,"delta":{"content":"Caf\u00e9 "}}]}\n\n'
    ": keep-alive\n\n"
    'data: {"choices":[{"index":0,"delta":{"content":"\U0001f642 ok"},"finish_reason":"stop"}]}'
    "\n\n"
    "data: [DONE]\n\n"
).encode()


def _call(index: int, call_id: str = "", name: str = "", arguments: str = "") -> dict[str, Any]:
    entry: dict[str, Any] = {"index": index}
    if call_id:
        entry.update(id=call_id, type="function")
    entry["function"] = {"name": name, "arguments": arguments} if name else {"arguments": arguments}
    return {"tool_calls": [entry]}


#: Text, then two tool calls: each first with its id and name, then argument fragments.
OPENAI_TOOLS = (
    _chunk({"role": "assistant", "content": None, "refusal": None})
    + _chunk({"content": "Adding."})
    + _chunk(_call(0, "call_Xq1", "add"))
    + _chunk(_call(0, arguments='{"a": 2'))
    + _chunk(_call(0, arguments=', "b": 3}'))
    + _chunk(_call(1, "call_Yz2", "shout"))
    + _chunk(_call(1, arguments='{"text": "h\u00e9"}'))
    + _chunk({}, "tool_calls")
    + _chunk(None, usage={"prompt_tokens": 80, "completion_tokens": 30, "total_tokens": 110})
    + b"data: [DONE]\n\n"
)

#: Gemini's OpenAI-compatible API: total_tokens counts thinking tokens beyond the two parts.
GEMINI_TEXT = (
    _chunk({"role": "assistant", "content": "Thought it through."}, "stop")
    + _chunk(None, usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 415})
    + b"data: [DONE]\n\n"
)


def event(name: str, data: dict[str, Any]) -> bytes:
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"event: {name}\ndata: {text}\n\n".encode()


#: A Messages stream: text, a ping, a tool_use block whose input arrives in fragments.
ANTHROPIC_TOOLS = (
    event("message_start", {"type": "message_start", "message": {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
        "content": [], "model": "claude-sonnet-4-5-20250929", "stop_reason": None,
        "stop_sequence": None, "usage": {"input_tokens": 472, "cache_creation_input_tokens": 0,
                                         "cache_read_input_tokens": 0, "output_tokens": 2}}})
    + event("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}})
    + b'event: ping\ndata: {"type": "ping"}\n\n'
    + event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": "Na\u00efve "}})
    + event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": "sum."}})
    + event("content_block_stop", {"type": "content_block_stop", "index": 0})
    + event("content_block_start", {"type": "content_block_start", "index": 1,
                                     "content_block": {"type": "tool_use",
                                                       "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                                                       "name": "add", "input": {}}})
    + event("content_block_delta", {"type": "content_block_delta", "index": 1,
                                     "delta": {"type": "input_json_delta", "partial_json": ""}})
    + event("content_block_delta", {"type": "content_block_delta", "index": 1,
                                     "delta": {"type": "input_json_delta",
                                               "partial_json": '{"a": 2, "b"'}})
    + event("content_block_delta", {"type": "content_block_delta", "index": 1,
                                     "delta": {"type": "input_json_delta",
                                               "partial_json": ": 3}"}})
    + event("content_block_stop", {"type": "content_block_stop", "index": 1})
    + event("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                               "usage": {"output_tokens": 89}})
    + event("message_stop", {"type": "message_stop"})
)  # fmt: skip

#: The error event the Messages API ends a stream with when it is overloaded.
OVERLOADED_EVENT = event(
    "error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
)
#: A Messages stream that the API ends with an error event (it was overloaded).
ANTHROPIC_OVERLOADED = ANTHROPIC_TOOLS.split(b"event: content_block_stop")[0] + OVERLOADED_EVENT


def openai_stream(
    text: str = "", calls: tuple[tuple[str, str, str], ...] = (), usage: tuple[int, int] = (10, 5)
) -> bytes:
    """A chat completion stream in the API's shape: ``text`` in two pieces, then each of the
    ``calls`` (id, name, arguments) in two, then the usage chunk and ``[DONE]``."""
    out = _chunk({"role": "assistant", "content": "" if text else None, "refusal": None})
    half = len(text) // 2
    for piece in (text[:half], text[half:]):
        if piece:
            out += _chunk({"content": piece})
    for index, (call_id, name, arguments) in enumerate(calls):
        out += _chunk(_call(index, call_id, name))
        half = len(arguments) // 2
        out += _chunk(_call(index, arguments=arguments[:half]))
        out += _chunk(_call(index, arguments=arguments[half:]))
    out += _chunk({}, "tool_calls" if calls else "stop")
    counts = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return out + _chunk(None, usage=counts) + b"data: [DONE]\n\n"


REASONING_ITEM = {
    "id": "rs_6820f383d7c08191846711c5df8233bc0ac5ba57aafcbac7",
    "type": "reasoning",
    "summary": [],
    "encrypted_content": "gAAAAABoIPOEmG1dPz0Qx5mX9tHxV3pRmKqjzvxRbJ2u",
}


def responses_body(
    text: str = "",
    calls: tuple[tuple[str, str, str], ...] = (),
    *,
    reasoning: bool = False,
    usage: tuple[int, int, int] = (37, 11, 48),
    status: str = "completed",
) -> dict[str, Any]:
    """A Responses API ``response`` object; ``calls`` are (call_id, name, arguments)."""
    output: list[dict[str, Any]] = [dict(REASONING_ITEM)] if reasoning else []
    if text:
        output.append({
            "id": "msg_67ccd3acc8d48190a77525dc6de64b4104becb25c6f6a1a0", "type": "message",
            "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        })  # fmt: skip
    for i, (call_id, name, arguments) in enumerate(calls):
        output.append({
            "id": f"fc_67ca09c5efe0819096d0511c92b8c890096610f474011cc{i}",
            "type": "function_call", "status": "completed", "arguments": arguments,
            "call_id": call_id, "name": name,
        })  # fmt: skip
    return {
        "id": "resp_67ccd3a9da748190baa7f1570fe91ac604becb25c6f6a1a0",
        "object": "response",
        "created_at": 1741476777,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": "o4-mini-2025-04-16",
        "output": output,
        "parallel_tool_calls": True,
        "store": True,
        "usage": {
            "input_tokens": usage[0],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage[1],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage[2],
        },
    }


def responses_stream(final: dict[str, Any]) -> bytes:
    """The events of a streamed response that ends as ``final``: each output item added,
    its text or arguments in two deltas, done, then ``response.completed``."""
    seq = iter(range(10_000))
    start = {**final, "status": "in_progress", "output": [], "usage": None}
    out = event(
        "response.created",
        {"type": "response.created", "sequence_number": next(seq), "response": start},
    )
    out += event(
        "response.in_progress",
        {"type": "response.in_progress", "sequence_number": next(seq), "response": start},
    )
    for index, item in enumerate(final["output"]):
        if item["type"] == "message":
            added = {**item, "status": "in_progress", "content": []}
        elif item["type"] == "function_call":
            added = {**item, "status": "in_progress", "arguments": ""}
        else:
            added = item
        out += event(
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "sequence_number": next(seq),
                "output_index": index,
                "item": added,
            },
        )
        if item["type"] == "message":
            text = item["content"][0]["text"]
            common = {"item_id": item["id"], "output_index": index, "content_index": 0}
            for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                out += event(
                    "response.output_text.delta",
                    {
                        "type": "response.output_text.delta",
                        "sequence_number": next(seq),
                        **common,
                        "delta": piece,
                        "logprobs": [],
                    },
                )
            out += event(
                "response.output_text.done",
                {
                    "type": "response.output_text.done",
                    "sequence_number": next(seq),
                    **common,
                    "text": text,
                    "logprobs": [],
                },
            )
        if item["type"] == "function_call":
            arguments = item["arguments"]
            for piece in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
                out += event(
                    "response.function_call_arguments.delta",
                    {
                        "type": "response.function_call_arguments.delta",
                        "sequence_number": next(seq),
                        "item_id": item["id"],
                        "output_index": index,
                        "delta": piece,
                    },
                )
            out += event(
                "response.function_call_arguments.done",
                {
                    "type": "response.function_call_arguments.done",
                    "sequence_number": next(seq),
                    "item_id": item["id"],
                    "output_index": index,
                    "arguments": arguments,
                },
            )
        out += event(
            "response.output_item.done",
            {
                "type": "response.output_item.done",
                "sequence_number": next(seq),
                "output_index": index,
                "item": item,
            },
        )
    return out + event(
        "response.completed",
        {"type": "response.completed", "sequence_number": next(seq), "response": final},
    )


#: A Messages stream the API ends with an error event after some text and a whole tool call.
ANTHROPIC_OVERLOADED_AFTER_CALL = (
    ANTHROPIC_TOOLS.split(b"event: message_delta")[0] + OVERLOADED_EVENT
)


def _router_chunk(
    delta: dict[str, Any], finish: str | None, native: str | None, **extra: Any
) -> bytes:
    body = {
        "id": "gen-1764590000-Qm3kX2pL9vTz",
        "provider": "Google",
        "model": "google/gemini-2.5-flash",
        "object": "chat.completion.chunk",
        "created": 1764590000,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                     "native_finish_reason": native, "logprobs": None}],
        **extra,
    }  # fmt: skip
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


#: OpenRouter cut off by the token limit before any text: a ``finish_reason: "length"`` chunk,
#: then a chunk with its ``error`` beside ``choices``, and ``[DONE]``.
OPENROUTER_TOKEN_LIMIT = (
    b": OPENROUTER PROCESSING\n\n"
    + _router_chunk({"role": "assistant", "content": ""}, None, None)
    + _router_chunk({"role": "assistant", "content": ""}, "length", "MAX_TOKENS")
    + _router_chunk(
        {"role": "assistant", "content": ""}, "error", None,
        error={"code": 400, "message": "Token limit reached"},
    )
    + b"data: [DONE]\n\n"
)  # fmt: skip

#: OpenRouter's mid-stream failure as its docs show it: text, then an ``error`` beside a choice
#: whose ``finish_reason`` is ``"error"``, then ``[DONE]``: the text is cut short.
OPENROUTER_MIDSTREAM_ERROR = (
    _router_chunk({"role": "assistant", "content": "Half an ans"}, None, None)
    + _router_chunk(
        {"role": "assistant", "content": ""}, "error", None,
        error={"code": "server_error", "message": "Provider disconnected unexpectedly"},
    )
    + b"data: [DONE]\n\n"
)  # fmt: skip


def anthropic_tool_stream(
    name: str, fragments: tuple[str, ...], *, model: str = "claude-3-5-haiku-20241022"
) -> bytes:
    """A Messages stream whose only block is a call of tool ``name``, its input arriving in
    ``fragments`` (a forced tool choice's answer: no text before it)."""
    out = event("message_start", {"type": "message_start", "message": {
        "id": "msg_01Aq9w8mT7YXxkzuUo3PeCdB", "type": "message", "role": "assistant",
        "content": [], "model": model, "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 389, "output_tokens": 1}}})  # fmt: skip
    out += event("content_block_start", {"type": "content_block_start", "index": 0,
                                          "content_block": {"type": "tool_use",
                                                            "id": "toolu_01Lk8Rh2uYqQ3f",
                                                            "name": name,
                                                            "input": {}}})  # fmt: skip
    for piece in ("", *fragments):
        out += event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                              "delta": {"type": "input_json_delta",
                                                        "partial_json": piece}})  # fmt: skip
    out += event("content_block_stop", {"type": "content_block_stop", "index": 0})
    out += event("message_delta", {"type": "message_delta",
                                    "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                                    "usage": {"output_tokens": 41}})  # fmt: skip
    return out + event("message_stop", {"type": "message_stop"})


def openai_refusal_stream(refusal: str) -> bytes:
    """A chat completion stream in which the model refuses, in two pieces."""
    half = len(refusal) // 2
    out = _chunk({"role": "assistant", "content": None, "refusal": ""})
    out += _chunk({"refusal": refusal[:half]}) + _chunk({"refusal": refusal[half:]})
    counts = {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39}
    return out + _chunk({}, "stop") + _chunk(None, usage=counts) + b"data: [DONE]\n\n"
