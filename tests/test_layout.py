"""The house rule the README states: no module of the library is over 400 lines."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 400


def test_no_module_of_the_library_is_over_400_lines() -> None:
    modules = [*(ROOT / "server").rglob("*.py"), *(ROOT / "client" / "cleveragents").rglob("*.py")]
    assert modules
    long = {
        str(path.relative_to(ROOT)): count
        for path in modules
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    assert long == {}
