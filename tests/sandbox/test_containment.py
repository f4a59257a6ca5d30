"""Every known way out of a sandbox is refused with a ``denied`` record naming the path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cleveragents.sandbox import Sandbox, file_tools
from cleveragents.sandbox.paths import MAX_PATH
from cleveragents.tool import ErrorKind, ToolCall, ToolDeniedError, ToolRunner

from .conftest import CallTool

ESCAPES_BY_DOTDOT = [
    "..",
    "../outside/secret.txt",
    "../root2/secret.txt",
    "../root_backup/secret.txt",
    "sub/../../outside/secret.txt",
    "sub/../..",
    "a/b/../../../outside/secret.txt",
    "./../outside/secret.txt",
    "sub/..",
    "..\\outside\\secret.txt",
]


@pytest.mark.parametrize("path", ESCAPES_BY_DOTDOT)
async def test_dotdot_anywhere_in_a_path_is_denied(call_tool: CallTool, path: str) -> None:
    record = await call_tool("read_file", path=path)
    assert not record.success
    assert record.error_kind is ErrorKind.DENIED
    assert repr(path) in (record.error or "")


@pytest.mark.parametrize("suffix", ["", "/notes.txt"])
async def test_absolute_paths_are_denied_even_inside_the_root(
    call_tool: CallTool, root: Path, suffix: str
) -> None:
    path = f"{root}{suffix}"
    record = await call_tool("read_file", path=path)
    assert record.error_kind is ErrorKind.DENIED
    assert "relative to the sandbox root" in (record.error or "")


@pytest.mark.parametrize("path", ["/etc/passwd", "C:/Windows/win.ini", "\\\\server\\share"])
async def test_absolute_paths_of_any_style_are_denied(call_tool: CallTool, path: str) -> None:
    record = await call_tool("read_file", path=path)
    assert record.error_kind is ErrorKind.DENIED


async def test_a_sibling_directory_sharing_the_roots_prefix_is_unreachable(
    call_tool: CallTool, root: Path
) -> None:
    for sibling in ("root2", "root_backup"):
        as_absolute = await call_tool("read_file", path=f"{root}{sibling[4:]}/secret.txt")
        assert as_absolute.error_kind is ErrorKind.DENIED
        as_relative = await call_tool("read_file", path=f"{sibling}/secret.txt")
        assert not as_relative.success  # resolved inside the root, where it does not exist
        assert "TOP SECRET" not in str(as_relative.output)


async def test_a_symlink_as_the_file_is_not_followed_for_reading(
    call_tool: CallTool, root: Path, outside: Path
) -> None:
    (root / "link.txt").symlink_to(outside / "secret.txt")
    record = await call_tool("read_file", path="link.txt")
    assert record.error_kind is ErrorKind.DENIED
    assert "'link.txt'" in (record.error or "")
    assert record.output == {}


async def test_a_symlink_as_the_file_is_replaced_not_written_through(
    call_tool: CallTool, root: Path, outside: Path
) -> None:
    (root / "link.txt").symlink_to(outside / "secret.txt")
    record = await call_tool("write_file", path="link.txt", content="pwned")
    assert record.error_kind is ErrorKind.DENIED
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"


async def test_editing_through_a_symlinked_file_is_denied(
    call_tool: CallTool, root: Path, outside: Path
) -> None:
    (root / "link.txt").symlink_to(outside / "secret.txt")
    record = await call_tool("edit_file", path="link.txt", old_text="TOP", new_text="NO")
    assert record.error_kind is ErrorKind.DENIED
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"


async def test_a_symlinked_parent_directory_is_not_followed(
    call_tool: CallTool, root: Path, outside: Path
) -> None:
    (root / "dirlink").symlink_to(outside, target_is_directory=True)
    read = await call_tool("read_file", path="dirlink/secret.txt")
    write = await call_tool("write_file", path="dirlink/new.txt", content="x")
    listing = await call_tool("list_dir", path="dirlink")
    assert {r.error_kind for r in (read, write, listing)} == {ErrorKind.DENIED}
    assert not (outside / "new.txt").exists()


async def test_a_dangling_symlink_cannot_create_a_file_outside(
    call_tool: CallTool, root: Path, outside: Path
) -> None:
    (root / "newlink.txt").symlink_to(outside / "created.txt")
    record = await call_tool("write_file", path="newlink.txt", content="x")
    assert record.error_kind is ErrorKind.DENIED
    assert not (outside / "created.txt").exists()


async def test_a_symlink_swapped_in_during_resolution_is_not_followed(
    root: Path, outside: Path
) -> None:
    """A check-then-open would follow the swapped link; fd-relative O_NOFOLLOW opens do not."""
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "secret.txt").write_text("inside\n")

    class SwappingSandbox(Sandbox):
        def _step(self, fd: int, part: str, path: str, create: bool) -> int:
            next_fd = super()._step(fd, part, path, create)
            if part == "a":  # between two steps, an attacker swaps a/b for a symlink
                os.rename(root / "a" / "b", root / "a" / "b_moved")
                (root / "a" / "b").symlink_to(outside, target_is_directory=True)
            return next_fd

    sandbox = SwappingSandbox(str(root))
    with pytest.raises(ToolDeniedError, match="symbolic link"), sandbox.parent_fd("a/b/secret.txt"):
        pass


async def test_a_directory_swapped_after_resolution_keeps_the_write_inside(
    root: Path, outside: Path
) -> None:
    (root / "sub").mkdir()
    sandbox = Sandbox(str(root))
    with sandbox.parent_fd("sub/file.txt") as (parent, name):
        os.rename(root / "sub", root / "sub_moved")
        (root / "sub").symlink_to(outside, target_is_directory=True)
        fd = sandbox.open_file(parent, name, "sub/file.txt", os.O_WRONLY | os.O_CREAT)
        os.write(fd, b"stays inside")
        os.close(fd)
    assert (root / "sub_moved" / "file.txt").read_text() == "stays inside"
    assert not (outside / "file.txt").exists()


@pytest.mark.parametrize("path", ["notes\x00.txt", "\x00", "sub/\x00/x"])
async def test_nul_bytes_are_denied(call_tool: CallTool, path: str) -> None:
    record = await call_tool("read_file", path=path)
    assert record.error_kind is ErrorKind.DENIED
    assert "NUL" in (record.error or "")


async def test_a_very_long_path_is_denied(call_tool: CallTool) -> None:
    record = await call_tool("read_file", path="a/" * (MAX_PATH // 2 + 1))
    assert record.error_kind is ErrorKind.DENIED
    assert "too long" in (record.error or "")


async def test_a_very_long_component_is_denied(call_tool: CallTool) -> None:
    record = await call_tool("write_file", path="x" * 300, content="")
    assert record.error_kind is ErrorKind.DENIED
    assert "too long" in (record.error or "")


async def test_search_does_not_follow_symlinks_out_of_the_sandbox(
    call_tool: CallTool, root: Path, outside: Path
) -> None:
    (root / "dirlink").symlink_to(outside, target_is_directory=True)
    (root / "filelink.txt").symlink_to(outside / "secret.txt")
    record = await call_tool("search_files", pattern="SECRET")
    assert record.success
    assert record.output["matches"] == []


async def test_list_dir_shows_symlinks_without_following_them(
    call_tool: CallTool, root: Path, outside: Path
) -> None:
    (root / "dirlink").symlink_to(outside, target_is_directory=True)
    record = await call_tool("list_dir", path=".")
    entries = {e["name"]: e["type"] for e in record.output["entries"]}
    assert entries == {"dirlink": "symlink", "notes.txt": "file"}


async def test_file_tools_without_a_sandbox_root_are_denied() -> None:
    runner = ToolRunner(file_tools())
    record = await runner.run(ToolCall("c1", "read_file", {"path": "x"}), iteration=1)
    assert record.error_kind is ErrorKind.DENIED
    assert "sandbox_root" in (record.error or "")


async def test_a_model_cannot_choose_its_own_sandbox_root(
    call_tool: CallTool, outside: Path
) -> None:
    record = await call_tool("read_file", path="secret.txt", sandbox_root=str(outside))
    assert not record.success
    assert "TOP SECRET" not in str(record.output)
