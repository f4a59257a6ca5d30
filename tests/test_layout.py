"""The house rule the README states: no module of the library is over 400 lines, in Python, in
the Node.js client or in the Go client."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 400


def _over_the_limit(modules: list[Path]) -> dict[str, int]:
    """The modules longer than LIMIT lines, by path, with their line counts."""
    return {
        str(path.relative_to(ROOT)): count
        for path in modules
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > LIMIT
    }


def test_no_module_of_the_library_is_over_400_lines() -> None:
    modules = [*(ROOT / "server").rglob("*.py"), *(ROOT / "client" / "cleveragents").rglob("*.py")]
    assert modules
    assert _over_the_limit(modules) == {}


def test_no_module_of_the_node_client_is_over_400_lines() -> None:
    modules = list((ROOT / "client" / "node" / "src").rglob("*.js"))
    assert modules
    assert _over_the_limit(modules) == {}


def test_no_file_of_the_go_client_is_over_400_lines() -> None:
    """The hand-written Go (the helper package and the example; not the generated code, nor
    the tests, which the Python rule does not cover either)."""
    modules = [
        path
        for path in (ROOT / "client" / "go").rglob("*.go")
        if "toolruntimev1" not in path.parts and not path.name.endswith("_test.go")
    ]
    assert modules
    assert _over_the_limit(modules) == {}
