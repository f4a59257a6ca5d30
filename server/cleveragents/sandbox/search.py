"""``search_files``: lines that contain a text, or match an RE2 expression, under a directory.

It runs in linear time whatever the pattern: text is found with ``bytes.find`` and
expressions by RE2 (google-re2), which has no backtracking (so no backreferences or
lookaround either). Files are searched as bytes, one line at a time (``\\n`` ends a line, a
trailing ``\\r`` is dropped). The walk is iterative, depth first, in name order; it never
follows a symlink, and it keeps at most ``_OPEN_DIRS`` directories open. It stops at the
call's timeout, so a thread left behind by a timed-out call ends soon after.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable

from cleveragents.sandbox.filesystems import is_pseudo_device, pseudo_type_of_fd
from cleveragents.sandbox.paths import Sandbox
from cleveragents.tool import ToolError, current_call
from cleveragents.tool.execution.linear_regex import compile_linear

__all__ = ["MAX_SEARCHED_FILE", "MAX_SEARCH_RESULTS", "search_tree"]

MAX_SEARCH_RESULTS = 200
MAX_SEARCHED_FILE = 2 * 1024 * 1024
#: Directories opened ahead of their turn; the others are opened from the root when due.
_OPEN_DIRS = 64
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: RE2's own memory bound for a compiled expression (its default is 8 MiB).
_RE2_MAX_MEM = 32 * 1024 * 1024

#: ``(start, end)`` of the first match in ``data`` at or after ``pos``, or ``None``.
Finder = Callable[[bytes, int], "tuple[int, int] | None"]


def search_tree(sandbox: Sandbox, path: str, pattern: str, regex: bool) -> dict[str, object]:
    """The matching lines under ``path`` (at most ``MAX_SEARCH_RESULTS``), and whether the list
    was cut short."""
    find = _finder(pattern, regex)
    scope = current_call()
    deadline = (
        time.monotonic() + scope.timeout_s
        if scope is not None and scope.timeout_s is not None
        else None
    )
    matches: list[dict[str, object]] = []
    with sandbox.dir_fd(path) as top:
        # (an open descriptor, or None to open it from the root; its components; its path)
        stack: list[tuple[int | None, list[str], str]] = [(os.dup(top), [], path)]
        opened = 1
        try:
            while stack:
                fd, parts, rel = stack.pop()
                if fd is None:
                    fd = _open_dir(sandbox, path, parts)
                else:
                    opened -= 1
                try:
                    if deadline is not None and time.monotonic() > deadline:
                        raise ToolError("search_files ran out of time")
                    if pseudo_type_of_fd(fd) is not None:
                        continue  # a procfs or sysfs mounted inside the root: not searched
                    subdirs = _search_dir(fd, rel, find, matches)
                    if len(matches) >= MAX_SEARCH_RESULTS:
                        return {"matches": matches, "truncated": True}
                    for name in reversed(subdirs):  # popped in name order
                        child: int | None = None
                        if opened < _OPEN_DIRS:
                            try:
                                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                                opened += 1
                            except OSError:
                                continue  # gone, or swapped for a link: skipped
                        stack.append((child, [*parts, name], os.path.join(rel, name)))
                finally:
                    os.close(fd)
        finally:
            for fd, _, _ in stack:
                if fd is not None:
                    os.close(fd)
    return {"matches": matches, "truncated": False}


def _finder(pattern: str, regex: bool) -> Finder:
    needle = pattern.encode("utf-8", "surrogateescape")
    if not regex:

        def find_text(data: bytes, pos: int) -> tuple[int, int] | None:
            start = data.find(needle, pos)
            return None if start < 0 else (start, start + len(needle))

        return find_text
    try:
        # A match never spans lines, as if each line were searched alone.
        compiled = compile_linear(b"(?m)" + needle, max_mem=_RE2_MAX_MEM, never_nl=True)
    except ValueError as exc:
        raise ToolError(
            f"invalid regular expression (RE2 syntax, which has no backreferences or "
            f"lookaround): {exc}"
        ) from None

    def find_expression(data: bytes, pos: int) -> tuple[int, int] | None:
        found = compiled.search(data, pos)
        return None if found is None else (found.start(), found.end())

    return find_expression


def _open_dir(sandbox: Sandbox, path: str, parts: list[str]) -> int:
    with sandbox.dir_fd(path) as top:
        fd = os.dup(top)
    try:
        for part in parts:
            next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    except OSError:
        os.close(fd)
        raise ToolError(f"{os.path.join(path, *parts)!r} changed during the search") from None
    return fd


def _search_dir(fd: int, rel: str, find: Finder, matches: list[dict[str, object]]) -> list[str]:
    """Search the files of one directory, in name order; its subdirectories' names."""
    files: list[str] = []
    subdirs: list[str] = []
    with os.scandir(fd) as listing:
        for entry in listing:
            try:
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
                elif entry.is_file(follow_symlinks=False):
                    files.append(entry.name)
            except OSError:
                continue
    for name in sorted(files):
        _search_file(fd, name, os.path.normpath(os.path.join(rel, name)), find, matches)
        if len(matches) >= MAX_SEARCH_RESULTS:
            break
    return sorted(subdirs)


def _search_file(
    folder: int, name: str, rel: str, find: Finder, matches: list[dict[str, object]]
) -> None:
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=folder)
    except OSError:
        return  # a symlink or an unreadable file: skipped, never followed
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SEARCHED_FILE:
            return
        if is_pseudo_device(info.st_dev):
            return  # kernel state (procfs reports a size of 0), never searched
        data = os.read(fd, MAX_SEARCHED_FILE + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_SEARCHED_FILE or b"\x00" in data[:8192]:
        return  # larger than it said, or binary
    pos, line, counted = 0, 1, 0
    while len(matches) < MAX_SEARCH_RESULTS and (found := find(data, pos)) is not None:
        start = data.rfind(b"\n", 0, found[0]) + 1
        end = data.find(b"\n", found[0])
        end = len(data) if end < 0 else end
        line += data.count(b"\n", counted, start)
        counted = start
        text = data[start:end].removesuffix(b"\r").decode("utf-8", "replace")
        matches.append({"path": rel, "line": line, "text": text[:500]})
        if end >= len(data):
            break
        pos = end + 1
