"""File tools meet what a careless or hostile model sends, and stay bounded."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cleveragents.sandbox import file_tools
from cleveragents.sandbox.paths import Sandbox
from cleveragents.sandbox.tools import write_atomically
from cleveragents.tool import ErrorKind, ToolActorContext, ToolCall, ToolRunner

from .conftest import CallTool


async def test_a_catastrophic_regex_runs_in_linear_time(root: Path) -> None:
    # (a+)+$ over a run of a's that ends in b backtracks for minutes in Python's re.
    (root / "aaa.txt").write_text("a" * 40 + "b\n" + "aaab\n")
    runner = ToolRunner(file_tools(), default_timeout_s=10.0)
    call = ToolCall("c1", "search_files", {"pattern": "(a+)+$", "regex": True})
    record = await runner.run(call, iteration=1, context=ToolActorContext(sandbox_root=str(root)))
    assert record.success, record.error
    assert record.output["matches"] == []


async def test_a_regex_finds_lines_as_each_line_alone(call_tool: CallTool, root: Path) -> None:
    (root / "code.py").write_text("def main():\r\n    return 1\n\ndef helper(x):\n")
    record = await call_tool("search_files", pattern=r"^def (\w+)\($", regex=True)
    assert record.output["matches"] == []  # the lines end in ':', so '$' cannot follow '('
    record = await call_tool("search_files", pattern=r"^def \w+\(", regex=True)
    assert record.output["matches"] == [
        {"path": "code.py", "line": 1, "text": "def main():"},
        {"path": "code.py", "line": 4, "text": "def helper(x):"},
    ]
    record = await call_tool("search_files", pattern=r"main\(\):\s+return", regex=True)
    assert record.output["matches"] == []  # a match never spans two lines


async def test_a_pattern_re2_cannot_run_is_refused_naming_the_syntax(call_tool: CallTool) -> None:
    record = await call_tool("search_files", pattern=r"(a)\1", regex=True)
    assert record.error_kind is ErrorKind.EXCEPTION
    assert "invalid regular expression (RE2 syntax" in (record.error or "")


async def test_search_files_walks_a_tree_1500_levels_deep(call_tool: CallTool, root: Path) -> None:
    _make_chain(root, 1500, b"the needle\n")
    try:
        record = await call_tool("search_files", pattern="needle")
    finally:
        _remove_chain(root, 1500)  # shutil.rmtree (pytest's clean-up) would recurse too deep
    assert record.success, record.error
    [match] = record.output["matches"]
    assert match["path"] == "/".join(["d"] * 1500 + ["deep.txt"])
    assert match["line"] == 1


def _make_chain(root: Path, depth: int, content: bytes) -> None:
    """``root/d/d/.../d/deep.txt``, ``depth`` directories deep, made through descriptors."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        file_fd = os.open("deep.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(file_fd, content)
        os.close(file_fd)
    finally:
        os.close(fd)


def _remove_chain(root: Path, depth: int) -> None:
    # Bottom up, by paths of at most 3,000 characters (PATH_MAX is 4,096).
    os.unlink(root.joinpath(*["d"] * depth, "deep.txt"))
    for level in range(depth, 0, -1):
        os.rmdir(root.joinpath(*["d"] * level))


async def test_file_tools_refuse_a_procfs_root_whose_files_report_no_size() -> None:
    # procfs files report st_size 0 (/proc/self/pagemap holds gigabytes, environ the keys):
    # the tools refuse the whole file system rather than read kernel state.
    runner = ToolRunner(file_tools())
    call = ToolCall("c1", "read_file", {"path": "environ"})
    root = f"/proc/{os.getpid()}"  # /proc/self is a symbolic link: refused as one
    record = await runner.run(call, iteration=1, context=ToolActorContext(sandbox_root=root))
    assert record.error_kind is ErrorKind.DENIED
    assert "proc file system" in (record.error or "")
    assert record.output == {}


async def test_write_file_keeps_the_mode_of_the_file_it_replaces(
    call_tool: CallTool, root: Path
) -> None:
    secret, script = root / "secret.env", root / "run.sh"
    secret.write_text("TOKEN=1\n")
    secret.chmod(0o600)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert (await call_tool("write_file", path="secret.env", content="TOKEN=2\n")).success
    assert (await call_tool("edit_file", path="run.sh", old_text="sh", new_text="bash")).success
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert secret.read_text() == "TOKEN=2\n"


class _ReadOnlyTemporaries(Sandbox):
    """A sandbox whose new files open read-only, so that writing into them fails."""

    def open_file(self, parent: int, name: str, path: str, flags: int, mode: int = 0o644) -> int:
        return super().open_file(parent, name, path, flags & ~os.O_WRONLY, mode)


def test_a_failed_write_leaves_no_temporary_file(root: Path) -> None:
    sandbox = _ReadOnlyTemporaries(str(root))
    try:
        write_atomically(sandbox, "notes.txt", b"new text", create_dirs=False)
    except OSError:
        pass
    else:  # pragma: no cover - the write must fail for this test to mean anything
        raise AssertionError("writing into a read-only descriptor succeeded")
    assert sorted(p.name for p in root.iterdir()) == ["notes.txt"]
    assert (root / "notes.txt").read_text() == "hello\nworld\n"


async def test_a_root_swapped_for_a_symlink_after_it_was_resolved_is_denied(
    tmp_path: Path,
) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "notes.md").write_text("inside")
    (outside / "notes.md").write_text("outside")
    runner = ToolRunner(file_tools())
    context = ToolActorContext(sandbox_root=str(root))  # resolved, as a run's root is
    read = ToolCall("c1", "read_file", {"path": "notes.md"})
    before = await runner.run(read, iteration=1, context=context)
    root.rename(tmp_path / "moved")
    root.symlink_to(outside)  # the same path now leads out of the allowed directory
    after = await runner.run(read, iteration=2, context=context)

    assert before.success
    assert after.error_kind is ErrorKind.DENIED
    assert "symbolic link" in (after.error or "")
    assert after.output == {}
