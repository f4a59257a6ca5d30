"""The examples the README shows run and print what it shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(name: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout


def test_the_demo_streams_the_run_and_its_summary() -> None:
    out = _run("demo.py")
    assert "capital_of" in out
    assert "FAILED LookupError: no capital on file for 'Atlantis'" in out
    assert "final answer: The capital of France is Paris (6 words)." in out
    assert "summary: stop_reason=final_answer, iterations=3, tool calls=3 (1 failed)" in out
    # The model's text streamed: it was typed before the whole answer arrived.
    assert "model is typing: I'll look up both capitals at once.\n" in out


def test_the_supervised_example_approves_markdown_and_denies_the_rest() -> None:
    lines = _run("supervised.py").splitlines()
    assert any("approved   by session: docs only" in line for line in lines)
    assert any(
        "DENIED     by session: only Markdown files may be written" in line for line in lines
    )
    assert lines[-1] == "final: Wrote NOTES.md; the build script change was refused."
