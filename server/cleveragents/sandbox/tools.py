"""File tools for coding agents, confined to the run's ``sandbox_root``.

Every path is relative to the sandbox root and resolved by :class:`Sandbox`; a refusal is a
failed record of kind ``denied`` that names the requested path. Reads and writes are capped.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat

from cleveragents.sandbox.paths import Sandbox
from cleveragents.sandbox.search import MAX_SEARCH_RESULTS, search_tree
from cleveragents.tool import ToolDeniedError, ToolError, ToolRegistry

__all__ = [
    "MAX_READ_BYTES",
    "MAX_SEARCH_RESULTS",
    "MAX_WRITE_BYTES",
    "file_tools",
    "write_atomically",
]

MAX_READ_BYTES = 1024 * 1024
MAX_WRITE_BYTES = 1024 * 1024


def _sandbox(sandbox_root: str | None) -> Sandbox:
    if not sandbox_root:
        raise ToolDeniedError("file tools need a sandbox_root in the run's context")
    return Sandbox(sandbox_root)


def _read(sandbox: Sandbox, path: str, limit: int) -> bytes:
    """The file's bytes, at most ``limit``: counted as they are read, since some files (procfs)
    report a size of 0 whatever they hold."""
    with sandbox.parent_fd(path) as parent:
        fd = sandbox.open_file(parent[0], parent[1], path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            size = os.fstat(fd).st_size
            if size > limit:
                raise ToolError(f"{path!r} is {size} bytes, more than the {limit}-byte read cap")
            chunks = []
            read = 0
            while read <= limit and (chunk := os.read(fd, 65536)):
                chunks.append(chunk)
                read += len(chunk)
            if read > limit:
                raise ToolError(f"{path!r} holds more than the {limit}-byte read cap")
            return b"".join(chunks)
        finally:
            os.close(fd)


def write_atomically(sandbox: Sandbox, path: str, data: bytes, *, create_dirs: bool) -> None:
    """Write atomically: a temporary file in the same directory, renamed over the target.

    A file that existed keeps its permission bits (a 0600 secret stays private, a script stays
    executable); a new one gets 0644 less the umask. The temporary file never outlives a
    failed write.
    """
    if len(data) > MAX_WRITE_BYTES:
        raise ToolError(f"refusing to write {len(data)} bytes to {path!r}: cap {MAX_WRITE_BYTES}")
    with sandbox.parent_fd(path, create=create_dirs) as (parent, name):
        try:
            existing = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            existing = None
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            raise ToolDeniedError(f"access denied to {path!r}: it exists and is not a regular file")
        temp = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
        fd = sandbox.open_file(parent, temp, path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            try:
                if existing is not None:
                    os.fchmod(fd, stat.S_IMODE(existing.st_mode))
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=parent)
            raise


def file_tools() -> ToolRegistry:
    """A registry of ``read_file``, ``write_file``, ``edit_file``, ``list_dir``,
    ``search_files`` and ``make_dir``."""
    registry = ToolRegistry()

    @registry.tool(idempotent=True)
    def read_file(path: str, sandbox_root: str | None = None) -> dict[str, object]:
        """Read a UTF-8 text file from the sandbox.

        Args:
            path: The file's path, relative to the sandbox root.
        """
        data = _read(_sandbox(sandbox_root), path, MAX_READ_BYTES)
        return {"path": path, "content": data.decode("utf-8", "replace"), "bytes": len(data)}

    @registry.tool(side_effects=True)
    def write_file(
        path: str, content: str, create_dirs: bool = True, sandbox_root: str | None = None
    ) -> dict[str, object]:
        """Create or replace a text file in the sandbox.

        Args:
            path: The file's path, relative to the sandbox root.
            content: The whole new content of the file.
            create_dirs: Create missing parent directories.
        """
        data = content.encode("utf-8")
        write_atomically(_sandbox(sandbox_root), path, data, create_dirs=create_dirs)
        return {"path": path, "bytes": len(data)}

    @registry.tool(side_effects=True)
    def edit_file(
        path: str,
        old_text: str,
        new_text: str,
        replace_all: bool = False,
        sandbox_root: str | None = None,
    ) -> dict[str, object]:
        """Replace text in a file: exactly one occurrence unless replace_all is set.

        Args:
            path: The file's path, relative to the sandbox root.
            old_text: The text to find; it must occur exactly once unless replace_all.
            new_text: The replacement.
            replace_all: Replace every occurrence.
        """
        sandbox = _sandbox(sandbox_root)
        text = _read(sandbox, path, MAX_READ_BYTES).decode("utf-8")
        count = text.count(old_text) if old_text else 0
        if count == 0:
            raise ToolError(f"old_text does not occur in {path!r}")
        if count > 1 and not replace_all:
            raise ToolError(
                f"old_text occurs {count} times in {path!r}; set replace_all or widen it"
            )
        write_atomically(
            sandbox, path, text.replace(old_text, new_text).encode("utf-8"), create_dirs=False
        )
        return {"path": path, "replacements": count}

    @registry.tool(idempotent=True)
    def list_dir(path: str = ".", sandbox_root: str | None = None) -> dict[str, object]:
        """List a directory of the sandbox; symbolic links are shown, never followed.

        Args:
            path: The directory, relative to the sandbox root ("." for the root).
        """
        sandbox = _sandbox(sandbox_root)
        entries = []
        with sandbox.dir_fd(path) as fd, os.scandir(fd) as listing:
            for entry in listing:
                info = entry.stat(follow_symlinks=False)
                kind = (
                    "symlink" if entry.is_symlink()
                    else "dir" if stat.S_ISDIR(info.st_mode)
                    else "file" if stat.S_ISREG(info.st_mode)
                    else "other"
                )  # fmt: skip
                entries.append({"name": entry.name, "type": kind, "size": info.st_size})
        entries.sort(key=lambda e: str(e["name"]))
        return {"path": path, "entries": entries}

    @registry.tool(idempotent=True)
    def search_files(
        pattern: str, path: str = ".", regex: bool = False, sandbox_root: str | None = None
    ) -> dict[str, object]:
        """Find lines containing a text (or matching a regular expression) under a directory.

        Args:
            pattern: The text to look for, or an RE2 regular expression if regex is set (RE2
                has no backreferences or lookaround).
            path: The directory to search, relative to the sandbox root.
            regex: Treat pattern as a regular expression.
        """
        return search_tree(_sandbox(sandbox_root), path, pattern, regex)

    @registry.tool(side_effects=True)
    def make_dir(path: str, sandbox_root: str | None = None) -> dict[str, object]:
        """Create a directory (and its missing parents) in the sandbox.

        Args:
            path: The directory, relative to the sandbox root.
        """
        sandbox = _sandbox(sandbox_root)
        with sandbox.parent_fd(path, create=True) as (parent, name):
            try:
                os.mkdir(name, 0o755, dir_fd=parent)
            except FileExistsError:
                info = os.stat(name, dir_fd=parent, follow_symlinks=False)
                if not stat.S_ISDIR(info.st_mode):
                    raise ToolError(f"{path!r} exists and is not a directory") from None
        return {"path": path}

    return registry
