"""The README's examples are executed, so the front door cannot drift from the code."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _example(name: str) -> tuple[str, str]:
    """The python block after ``<!-- readme-example: name -->`` and the text block after it."""
    text = README.read_text(encoding="utf-8")
    match = re.search(
        rf"<!-- readme-example: {name} -->\n```python\n(.*?)```\n\n```text\n(.*?)```",
        text,
        re.S,
    )
    assert match, f"README example {name!r} not found"
    return match.group(1), match.group(2)


def test_the_spec_usage_example_in_the_readme_runs_unchanged_and_prints_what_it_shows() -> None:
    code, shown = _example("in-process")
    assert "runtime = ToolCallingRuntime(registry=registry, runner=runner," in code
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
    assert out.getvalue() == shown
