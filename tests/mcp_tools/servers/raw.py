"""An MCP server over stdio written by hand (no SDK), for the faults the SDK would not let a
server commit: ``garble`` writes a line that is not JSON on its stdout,
``spam_progress`` sends its progress notifications as fast as a pipe takes them, and
``big_progress`` sends COUNT reports whose messages are SIZE characters long,
``odd_progress`` reports progress and totals that are not finite numbers, and ``huge_text``
answers with a text of MEGABYTES MiB, on one line as every message.
``FAULT_DIR`` (an environment variable) gets ``pid-<pid>`` when it starts; ``RAW_BANNER``, when
set, is a line it prints on stdout before anything else (``RAW_BANNER_REPEAT`` times); with
``RAW_GARBLE_LIST`` set, it answers ``tools/list`` with a line that is not JSON; with
``RAW_PAGE_SIZE`` set, it lists its tools that many a page (``nextCursor``), and leaves
``list-<cursor>`` in ``FAULT_DIR`` for each page asked for.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
from pathlib import Path
from typing import Any

_OBJECT = {"type": "object"}
TOOLS = [
    {
        "name": "spam_progress",
        "description": "Report progress COUNT times, as fast as it can, then answer.",
        "inputSchema": {**_OBJECT, "properties": {"count": {"type": "integer"}}},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "garble",
        "description": "Write a line that is not JSON, and never answer.",
        "inputSchema": _OBJECT,
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "big_progress",
        "description": "Report progress COUNT times with a SIZE-character message, then answer.",
        "inputSchema": {
            **_OBJECT,
            "properties": {"count": {"type": "integer"}, "size": {"type": "integer"}},
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "odd_progress",
        "description": "Report progress NaN, then 1 of Infinity, then Infinity of 2, then answer.",
        "inputSchema": _OBJECT,
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "huge_text",
        "description": "Answer with a text of MEGABYTES MiB.",
        "inputSchema": {**_OBJECT, "properties": {"megabytes": {"type": "integer"}}},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "echo",
        "description": "Return the text.",
        "inputSchema": {**_OBJECT, "properties": {"text": {"type": "string"}}},
        "annotations": {"readOnlyHint": True},
    },
]
out = sys.stdout.buffer
lock = threading.Lock()


def send(message: dict[str, Any]) -> None:
    with lock:
        out.write(json.dumps(message).encode() + b"\n")
        out.flush()


def result(request_id: Any, value: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": value})


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": False}


def call(request_id: Any, params: dict[str, Any]) -> None:
    name, arguments = params["name"], params.get("arguments") or {}
    token = (params.get("_meta") or {}).get("progressToken")
    if name == "echo":
        result(request_id, text(arguments.get("text", "")))
    elif name == "huge_text":
        result(request_id, text("x" * (int(arguments["megabytes"]) * 1024 * 1024)))
    elif name == "garble":
        with lock:
            out.write(
                b'{"jsonrpc": "2.0", "id": ' + str(request_id).encode() + b", this is not JSON\n"
            )
            out.flush()
    elif name == "spam_progress":
        count = int(arguments["count"])
        with lock:
            for step in range(1, count + 1):
                note = {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": step, "total": count},
                }
                out.write(json.dumps(note).encode() + b"\n")
            out.flush()
        result(request_id, text(f"reported {count}"))
    elif name == "odd_progress":
        for progress, total in ((math.nan, None), (1, math.inf), (math.inf, 2)):
            params = {"progressToken": token, "progress": progress, "total": total}
            send({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
        result(request_id, text("odd"))
    elif name == "big_progress":
        count, size = int(arguments["count"]), int(arguments["size"])
        for step in range(1, count + 1):
            params = {"progressToken": token, "progress": step, "total": count}
            send({"jsonrpc": "2.0", "method": "notifications/progress",
                  "params": {**params, "message": "é" * size}})  # fmt: skip
        result(request_id, text(f"reported {count}"))
    else:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": name}})


def main() -> None:
    (Path(os.environ["FAULT_DIR"]) / f"pid-{os.getpid()}").touch()
    if banner := os.environ.get("RAW_BANNER"):  # what some servers print before they begin
        out.write((banner.encode() + b"\n") * int(os.environ.get("RAW_BANNER_REPEAT", "1")))
        out.flush()
    for line in sys.stdin.buffer:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue  # a notification: initialized, cancelled
        if method == "initialize":
            result(request_id, {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "1.0"},
            })  # fmt: skip
        elif method == "tools/list" and os.environ.get("RAW_GARBLE_LIST"):
            out.write(b'{"jsonrpc": "2.0", "id": ' + str(request_id).encode() + b", oops\n")
            out.flush()
        elif method == "tools/list" and (size := int(os.environ.get("RAW_PAGE_SIZE", "0"))):
            start = int((message.get("params") or {}).get("cursor") or 0)
            (Path(os.environ["FAULT_DIR"]) / f"list-{start}").touch()
            page: dict[str, Any] = {"tools": TOOLS[start : start + size]}
            if start + size < len(TOOLS):
                page["nextCursor"] = str(start + size)
            result(request_id, page)
        elif method == "tools/list":
            result(request_id, {"tools": TOOLS})
        elif method == "tools/call":
            call(request_id, message["params"])
        else:
            result(request_id, {})


if __name__ == "__main__":
    main()
