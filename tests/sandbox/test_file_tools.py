"""The file tools do their jobs inside the sandbox, within their size caps."""

from __future__ import annotations

from pathlib import Path

from cleveragents.sandbox.tools import MAX_READ_BYTES, MAX_WRITE_BYTES
from cleveragents.tool import ErrorKind

from .conftest import CallTool


async def test_read_file_returns_the_text(call_tool: CallTool) -> None:
    record = await call_tool("read_file", path="notes.txt")
    assert record.success
    assert record.output == {"path": "notes.txt", "content": "hello\nworld\n", "bytes": 12}


async def test_write_file_creates_parents_and_replaces_atomically(
    call_tool: CallTool, root: Path
) -> None:
    record = await call_tool("write_file", path="src/app/main.py", content="print(1)\n")
    assert record.success
    assert (root / "src" / "app" / "main.py").read_text() == "print(1)\n"
    await call_tool("write_file", path="src/app/main.py", content="print(2)\n")
    assert (root / "src" / "app" / "main.py").read_text() == "print(2)\n"
    assert sorted(p.name for p in (root / "src" / "app").iterdir()) == ["main.py"]


async def test_edit_file_replaces_exactly_one_occurrence(call_tool: CallTool, root: Path) -> None:
    record = await call_tool("edit_file", path="notes.txt", old_text="world", new_text="there")
    assert record.output == {"path": "notes.txt", "replacements": 1}
    assert (root / "notes.txt").read_text() == "hello\nthere\n"


async def test_edit_file_refuses_an_ambiguous_edit(call_tool: CallTool, root: Path) -> None:
    (root / "twice.txt").write_text("a a")
    record = await call_tool("edit_file", path="twice.txt", old_text="a", new_text="b")
    assert not record.success
    assert "occurs 2 times" in (record.error or "")
    assert (root / "twice.txt").read_text() == "a a"


async def test_list_dir_lists_entries_sorted(call_tool: CallTool, root: Path) -> None:
    (root / "sub").mkdir()
    record = await call_tool("list_dir")
    assert [(e["name"], e["type"]) for e in record.output["entries"]] == [
        ("notes.txt", "file"),
        ("sub", "dir"),
    ]


async def test_search_files_finds_lines_with_their_numbers(call_tool: CallTool, root: Path) -> None:
    (root / "pkg").mkdir()
    (root / "pkg" / "mod.py").write_text("import os\n\ndef world():\n    pass\n")
    record = await call_tool("search_files", pattern="world")
    assert record.output["matches"] == [
        {"path": "notes.txt", "line": 2, "text": "world"},
        {"path": "pkg/mod.py", "line": 3, "text": "def world():"},
    ]


async def test_search_files_with_a_bad_regex_fails_clearly(call_tool: CallTool) -> None:
    record = await call_tool("search_files", pattern="(", regex=True)
    assert record.error_kind is ErrorKind.EXCEPTION
    assert "invalid regular expression" in (record.error or "")


async def test_make_dir_creates_nested_directories(call_tool: CallTool, root: Path) -> None:
    record = await call_tool("make_dir", path="a/b/c")
    assert record.success
    assert (root / "a" / "b" / "c").is_dir()


async def test_reading_a_file_above_the_cap_fails(call_tool: CallTool, root: Path) -> None:
    (root / "big.bin").write_bytes(b"x" * (MAX_READ_BYTES + 1))
    record = await call_tool("read_file", path="big.bin")
    assert not record.success
    assert "read cap" in (record.error or "")


async def test_writing_more_than_the_cap_fails(call_tool: CallTool, root: Path) -> None:
    record = await call_tool("write_file", path="big.txt", content="x" * (MAX_WRITE_BYTES + 1))
    assert not record.success
    assert "cap" in (record.error or "")
    assert not (root / "big.txt").exists()


async def test_reading_a_missing_file_is_a_plain_failure(call_tool: CallTool) -> None:
    record = await call_tool("read_file", path="missing.txt")
    assert record.error_kind is ErrorKind.EXCEPTION
    assert "'missing.txt' does not exist" in (record.error or "")


async def test_reading_a_fifo_does_not_block(call_tool: CallTool, root: Path) -> None:
    import os

    os.mkfifo(root / "pipe")
    record = await call_tool("read_file", path="pipe")
    assert record.error_kind is ErrorKind.DENIED
    assert "not a regular file" in (record.error or "")
