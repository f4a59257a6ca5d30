"""``cleveragents-sidecar console``: the console's URL (a run's page with a run id), from the
settings or a running sidecar's ready file, checked against the console that answers there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ServeSidecar
from tests.redis_server import free_port


def console(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cleveragents.sidecar.cli", "console", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)


def test_it_prints_a_runs_page_from_a_running_sidecars_ready_file(
    serve_sidecar: ServeSidecar, tmp_path: Path
) -> None:
    ready = tmp_path / "ready.json"
    serve_sidecar(console_listen="127.0.0.1:0", ready_file=str(ready))
    url = json.loads(ready.read_text())["console_url"]

    shown = console("--ready-file", str(ready), "run/with space")

    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"{url}#/runs/run%2Fwith%20space\n"
    assert url.startswith("http://127.0.0.1:")


def test_it_prints_the_url_the_settings_give_and_checks_it_answers(
    serve_sidecar: ServeSidecar,
) -> None:
    port = free_port()
    serve_sidecar(console_listen=f"127.0.0.1:{port}")

    shown = console("--console-listen", f"127.0.0.1:{port}")

    assert (shown.returncode, shown.stdout) == (0, f"http://127.0.0.1:{port}/\n")


def test_nothing_answering_there_is_exit_status_2_with_the_url_still_printed() -> None:
    port = free_port()

    shown = console("--console-listen", f"127.0.0.1:{port}")

    assert shown.returncode == 2
    assert shown.stdout == f"http://127.0.0.1:{port}/\n"
    assert "no console answers at" in shown.stderr
    assert "console_listen set?" in shown.stderr


def test_a_console_that_is_off_or_on_a_picked_port_says_where_to_look(tmp_path: Path) -> None:
    off = console()
    picked = console("--console-listen", "127.0.0.1:0")
    ready = tmp_path / "ready.json"
    ready.write_text(json.dumps({"address": "127.0.0.1:1", "console_url": None}) + "\n")
    without = console("--ready-file", str(ready))

    assert (off.returncode, off.stdout) == (1, "")
    assert "the console is off: set console_listen" in off.stderr
    assert picked.returncode == 1
    assert "--ready-file" in picked.stderr
    assert without.returncode == 1
    assert "serves no console" in without.stderr
