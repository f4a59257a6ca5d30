"""What the commands write about a run, against a real ``serve``: its strings with their
control characters shown as escapes (on a real terminal, a pseudo-terminal, too), texts cut
only on a terminal, and a refused token explained for a command-line user."""

from __future__ import annotations

import http.server
import json
import os
import pty
import re
import select
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .conftest import CLI, CLI_WAIT_S

if TYPE_CHECKING:
    from tests.conftest import ServedSidecar, ServeSidecar

#: What a hostile model, tool or client might put in a run: clear the screen, retitle the
#: window, hide what follows, ring the bell, reverse the text that follows.
HOSTILE = "\x1b[2J\x1b]0;owned\x07\x1b[8mhidden\u202e\x9b31m"
SHOWN = "\\e[2J\\e]0;owned\\x07\\e[8mhidden\\u202e\\x9b31m"
#: The only escape sequence the commands write themselves: the progress line's erase.
OWN_ERASE = re.compile(r"\r\x1b\[2K")


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    done = subprocess.run(
        [CLI, *args], capture_output=True, text=True, timeout=CLI_WAIT_S,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def on_a_terminal(*args: str) -> tuple[int, str]:
    """Run ``cleveragents-sidecar args`` with its stdout on a pseudo-terminal; its exit
    status and everything it wrote there."""
    leader, follower = pty.openpty()
    process = subprocess.Popen([CLI, *args], stdout=follower, stderr=subprocess.PIPE)
    os.close(follower)
    written = bytearray()
    deadline = time.monotonic() + CLI_WAIT_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], deadline - time.monotonic())
            if not ready:
                break
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the command closed the terminal (it exited)
                break
            if not chunk:
                break
            written += chunk
        code = process.wait(CLI_WAIT_S)
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
            process.wait()
    return code, written.decode()


def script(tmp_path: Path, turns: Any) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(turns), encoding="utf-8")
    return str(path)


def hostile_run(tmp_path: Path) -> str:
    """A script whose model asks for a tool named with control characters and answers with
    them (the escape sequences of ``HOSTILE``)."""
    return script(
        tmp_path,
        [
            {"tool_calls": [{"id": "c1", "name": f"ev{HOSTILE}il", "arguments": {}}]},
            {"content": f"done {HOSTILE}"},
        ],
    )


@pytest.fixture
def served(serve_sidecar: ServeSidecar) -> ServedSidecar:
    return serve_sidecar()


def test_run_on_a_terminal_shows_the_models_control_characters_as_escapes(
    served: ServedSidecar, tmp_path: Path
) -> None:
    code, written = on_a_terminal(
        "run", f"go {HOSTILE}", "--script", hostile_run(tmp_path), "--run-id", "tty",
        "--target", served.address,
    )  # fmt: skip

    assert code == 0
    own_escapes_removed = OWN_ERASE.sub("", written)
    assert "\x1b" not in own_escapes_removed
    assert "\x07" not in own_escapes_removed
    assert "\u202e" not in own_escapes_removed
    assert f"ev{SHOWN}il" in written  # the unknown tool's record, and the table
    assert f"answer: done {SHOWN}" in written


def test_watch_runs_and_cancel_show_a_runs_strings_escaped(
    served: ServedSidecar, tmp_path: Path
) -> None:
    slow = script(
        tmp_path, [{"tool_calls": [{"id": "s1", "name": "sleep", "arguments": {"seconds": 60}}]}]
    )
    running = subprocess.Popen(
        [CLI, "run", f"nap {HOSTILE}", "--script", slow, "--run-id", "esc", "--detach",
         "--target", served.address],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert running.stdout is not None
        assert running.stdout.readline().startswith("run esc: ")  # started
        cancelled = cli("cancel", "esc", "--reason", f"stop {HOSTILE}", "--target", served.address)
        running.communicate(timeout=CLI_WAIT_S)
    finally:
        running.kill()
    watched = cli("watch", "esc", "--target", served.address)
    listed = cli("runs", "--target", served.address)

    assert cancelled == (0, "run esc: cancelled\n", "")
    assert watched[0] == 1
    assert f"reason: stop {SHOWN}" in watched[1]
    assert f"nap {SHOWN}"[:39] + "…" in listed[1]  # the start of the prompt
    for _, out, err in (cancelled, watched, listed):
        assert "\x1b" not in out + err
        assert "\x07" not in out + err


class _Provider(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that refuses the key, as OpenAI words it."""

    MESSAGE = (
        "Incorrect API key provided: sk-proj-********************WXYZ. You can find your API "
        "key at https://platform.openai.com/account/api-keys. Check that the key belongs to "
        "the project this request is for, and that the organization header matches it."
    )

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.dumps(
            {"error": {"message": self.MESSAGE, "type": "invalid_request_error",
                       "code": "invalid_api_key"}}
        ).encode()  # fmt: skip
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def provider() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Provider)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


def test_a_provider_error_reaches_a_pipe_whole(
    serve_sidecar: ServeSidecar, provider: str, tmp_path: Path
) -> None:
    config = tmp_path / "sidecar.toml"
    config.write_text(
        f'[profiles.gpt]\nkind = "openai"\nmodel = "gpt-x"\nbase_url = "{provider}"\n'
        'api_key_env = "TEST_PROVIDER_KEY"\nmax_retries = 0\n',
        encoding="utf-8",
    )
    served = serve_sidecar("--config", str(config), env={"TEST_PROVIDER_KEY": "sk-test"})

    code, out, _ = cli("run", "go", "--profile", "gpt", "--target", served.address)

    assert code == 1
    assert _Provider.MESSAGE in out  # not cut at 200 characters: this is not a terminal


def test_a_refused_token_tells_a_command_line_user_how_to_send_one(
    serve_sidecar: ServeSidecar,
) -> None:
    served = serve_sidecar(env={"TEST_CLI_TOKEN": "a-long-enough-token-1"},
                           auth_token_env="TEST_CLI_TOKEN")  # fmt: skip

    code, _, err = cli("runs", "--target", served.address, env={"CLEVERAGENTS_SIDECAR_TOKEN": ""})

    assert code == 2
    assert "UNAUTHENTICATED" in err
    assert err.rstrip().endswith(
        "(this command sends the token given with --token, or in $CLEVERAGENTS_SIDECAR_TOKEN)"
    )
