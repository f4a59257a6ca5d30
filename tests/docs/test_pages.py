"""Examples the docs pages show, besides the quick starts, run and print what they show."""

from __future__ import annotations

import contextlib
import io
import re

from .artifacts import DOCS


def test_the_in_process_example_of_the_python_reference_prints_what_it_shows() -> None:
    text = (DOCS / "reference" / "python.md").read_text(encoding="utf-8")
    match = re.search(
        r"<!-- docs-example: in-process -->\n```python\n(.*?)```\n\n```text\n(.*?)```", text, re.S
    )
    assert match, "the in-process example is gone"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(match.group(1), "python.md", "exec"), {"__name__": "docs_example"})
    assert out.getvalue() == match.group(2)
