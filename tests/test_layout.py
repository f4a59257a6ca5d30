"""The house rule on size: one module, one concept, split by concept and never by line count.

A module may grow past ``BUDGET`` lines only as one concept, and then says so where a reader
starts: its docstring (a Python module), or its opening comment (the Node.js and Go clients),
holds a paragraph that begins ``One concept:`` and says why it stays whole.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 600
MARK = "One concept:"


def _opening(path: Path, text: str) -> str:
    """The text a reader meets first: a Python module's docstring, else its leading comments."""
    if path.suffix == ".py":
        return ast.get_docstring(ast.parse(text)) or ""
    lines: list[str] = []
    for line in text.splitlines():
        if not re.match(r"\s*(//|/\*|\*)", line):
            if lines or not line.strip():
                continue
            break
        lines.append(line)
    return "\n".join(lines)


def _over_budget(modules: list[Path]) -> dict[str, int]:
    """The modules past the budget that do not say why they are one concept, with their sizes."""
    over = {}
    for path in modules:
        text = path.read_text(encoding="utf-8")
        count = len(text.splitlines())
        if count > BUDGET and MARK not in _opening(path, text):
            over[str(path.relative_to(ROOT))] = count
    return over


def test_no_module_of_the_library_outgrows_the_budget_without_saying_why() -> None:
    modules = [*(ROOT / "server").rglob("*.py"), *(ROOT / "client" / "cleveragents").rglob("*.py")]
    assert modules
    assert _over_budget(modules) == {}


def test_no_module_of_the_node_client_outgrows_the_budget_without_saying_why() -> None:
    modules = list((ROOT / "client" / "node" / "src").rglob("*.js"))
    assert modules
    assert _over_budget(modules) == {}


def test_no_file_of_the_go_client_outgrows_the_budget_without_saying_why() -> None:
    """The hand-written Go (the helper package and the example; not the generated code, nor
    the tests, which the Python rule does not cover either)."""
    modules = [
        path
        for path in (ROOT / "client" / "go").rglob("*.go")
        if "toolruntimev1" not in path.parts and not path.name.endswith("_test.go")
    ]
    assert modules
    assert _over_budget(modules) == {}


def test_a_module_past_the_budget_passes_once_its_docstring_says_why(tmp_path: Path) -> None:
    long = "\n".join(f"x{n} = {n}" for n in range(BUDGET + 1))
    quiet, said = tmp_path / "quiet.py", tmp_path / "said.py"
    quiet.write_text(f'"""A module."""\n{long}\n', encoding="utf-8")
    said.write_text(f'"""A module.\n\n{MARK} it is the loop.\n"""\n{long}\n', encoding="utf-8")
    assert MARK not in _opening(quiet, quiet.read_text(encoding="utf-8"))
    assert MARK in _opening(said, said.read_text(encoding="utf-8"))
