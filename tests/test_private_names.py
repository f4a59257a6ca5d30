"""No module, test, benchmark or example uses another module's ``_private`` names.

A name that starts with one underscore belongs to the module that defines it: another module
may not import it (``from m import _x``), reach it as an attribute (``thing._x``, where this
module defines no ``_x`` of its own), nor import a private module from outside the package it
belongs to (``cleveragents.providers._http`` is the providers' own). A few names of the
standard library are public for all their underscore: a named tuple's ``_replace``, ``_asdict``,
``_fields`` and ``_make``, and ``os._exit``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where the code is, and the package root each holds.
TREES = {
    "server": "server",
    "client": "client/cleveragents",
    "tests": "tests",
    "bench": "bench",
    "fuzz": "fuzz",
    "examples": "examples",
}
#: Public API despite the underscore (the standard library's conventions).
PUBLIC = frozenset({"_replace", "_asdict", "_fields", "_make", "_exit"})


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _files() -> Iterator[Path]:
    for tree in TREES.values():
        for path in (ROOT / tree).rglob("*.py"):
            if "node_modules" not in path.parts:
                yield path


def _package_of(path: Path, root: Path) -> str:
    """The dotted package a library file belongs to (``""`` for tests and the like)."""
    relative = path.relative_to(root)
    if relative.parts[0] != "server" and relative.parts[:2] != ("client", "cleveragents"):
        return ""
    return ".".join(relative.parts[1:-1])


def _own_names(tree: ast.AST) -> set[str]:
    """Every name the module defines or binds itself (so that ``self._x`` is its own)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # ``__slots__`` entries
    return names


def _uses(path: Path, root: Path = ROOT) -> Iterator[str]:
    """Each use of another module's private name in ``path`` (under ``root``), described."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own, package = _own_names(tree), _package_of(path, root)
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
            for alias in node.names:
                if _private(alias.name):
                    yield f"line {node.lineno}: from {node.module} import {alias.name}"
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        for module in modules:
            parts = module.split(".")
            for index, part in enumerate(parts):
                parent = ".".join(parts[:index])
                if _private(part) and parts[0] == "cleveragents" and not _within(package, parent):
                    line = getattr(node, "lineno", 0)
                    yield f"line {line}: imports {module}, private to {parent}"
                    break
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and node.attr not in own | PUBLIC
        ):
            yield f"line {node.lineno}: .{node.attr} (not this module's)"


def _within(package: str, parent: str) -> bool:
    return bool(package) and (package == parent or package.startswith(parent + "."))


def test_no_module_uses_another_modules_private_names() -> None:
    found = {str(path.relative_to(ROOT)): uses for path in _files() if (uses := list(_uses(path)))}
    assert found == {}


def test_the_check_sees_a_private_import_an_attribute_and_a_foreign_private_module(
    tmp_path: Path,
) -> None:
    source = (
        "from cleveragents.providers._http import new_client\n"
        "from tests.helpers import _start\n"
        "import thing\n"
        "thing._hidden()\n"
    )
    (tmp_path / "module.py").write_text(source, encoding="utf-8")
    assert list(_uses(tmp_path / "module.py", tmp_path)) == [
        "line 1: imports cleveragents.providers._http, private to cleveragents.providers",
        "line 2: from tests.helpers import _start",
        "line 4: ._hidden (not this module's)",
    ]
