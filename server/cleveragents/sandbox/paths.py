"""Open files and directories inside a sandbox root, and nowhere else.

Paths are resolved one component at a time from a descriptor of the root, each step opened
relative to the previous one with ``O_NOFOLLOW``: a symlink anywhere on the path (including
one swapped in while we walk) makes the open fail instead of leaving the root. Absolute
paths, ``..``, NUL bytes and over-long paths are refused before anything is opened. Every
directory and file opened is checked to be on ordinary storage: one on a pseudo file system
(a procfs bind-mounted inside the root, say) is refused, so no tool returns kernel state such
as a process's environment.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from cleveragents.sandbox.filesystems import pseudo_type_of_fd
from cleveragents.tool import ToolDeniedError, ToolError

__all__ = ["MAX_COMPONENT", "MAX_PATH", "Sandbox", "split_path"]

MAX_PATH = 4096
MAX_COMPONENT = 255
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_root(root: str) -> int:
    fd = os.open("/" if root.startswith("/") else ".", _DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        for part in (p for p in root.split("/") if p not in ("", ".")):
            try:
                step = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                linked = exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, fd)
                why = "a part of it is a symbolic link" if linked else exc.strerror
                raise ToolDeniedError(
                    f"the sandbox root {root!r} cannot be opened: {why} (a root is resolved "
                    "once, when its run starts)"
                ) from None
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def split_path(path: str) -> list[str]:
    """The components of a sandbox-relative path, or ``ToolDeniedError`` naming the path."""
    if not isinstance(path, str):
        raise ToolDeniedError(f"path must be a string, got {type(path).__name__}")
    if "\x00" in path:
        raise ToolDeniedError(f"access denied to {path!r}: the path contains a NUL byte")
    if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH:
        raise ToolDeniedError(f"access denied to {path[:64]!r}...: the path is too long")
    if path.startswith(("/", "\\")) or (len(path) > 1 and path[1] == ":"):
        raise ToolDeniedError(f"access denied to {path!r}: use a path relative to the sandbox root")
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    for part in parts:
        if part == "..":
            raise ToolDeniedError(f"access denied to {path!r}: '..' is not allowed in paths")
        if len(part.encode("utf-8", "surrogateescape")) > MAX_COMPONENT:
            raise ToolDeniedError(f"access denied to {path!r}: a path component is too long")
    return parts


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A directory tree that file tools may not leave."""

    root: str

    @contextlib.contextmanager
    def root_fd(self) -> Iterator[int]:
        """A descriptor of the root directory itself, opened one component at a time with
        ``O_NOFOLLOW``: the sidecar resolves a run's root once, when the run starts, and a
        component swapped for a symlink since then (to leave the directory the operator
        allowed) makes every later call ``denied`` instead of following it."""
        fd = _open_root(self.root)
        try:
            _refuse_pseudo(fd, "the sandbox root")
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def parent_fd(self, path: str, *, create: bool = False) -> Iterator[tuple[int, str]]:
        """``(descriptor of the parent directory, final name)`` for ``path``.

        ``create`` makes missing parent directories (mode 0755) on the way.
        """
        parts = split_path(path)
        if not parts:
            raise ToolDeniedError(f"{path!r} names the sandbox root, not an entry in it")
        with self.root_fd() as root:
            fd = os.dup(root)
            try:
                for part in parts[:-1]:
                    fd = self._descend(fd, part, path, create)
                yield fd, parts[-1]
            finally:
                os.close(fd)

    @contextlib.contextmanager
    def dir_fd(self, path: str) -> Iterator[int]:
        """A descriptor of the directory ``path`` (``""`` or ``"."`` is the root)."""
        parts = split_path(path)
        with self.root_fd() as root:
            fd = os.dup(root)
            try:
                for part in parts:
                    fd = self._descend(fd, part, path, False)
                yield fd
            finally:
                os.close(fd)

    def open_file(self, parent: int, name: str, path: str, flags: int, mode: int = 0o644) -> int:
        """Open ``name`` in ``parent`` without following a symlink; only regular files."""
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
        except OSError as exc:
            raise self._denied_or_missing(exc, path) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ToolDeniedError(f"{path!r} is not a regular file")
            _refuse_pseudo(fd, repr(path))
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _descend(self, fd: int, part: str, path: str, create: bool) -> int:
        """Replace ``fd`` by a descriptor of its subdirectory ``part`` (closing ``fd``)."""
        next_fd = self._step(fd, part, path, create)
        os.close(fd)
        return next_fd

    def _step(self, fd: int, part: str, path: str, create: bool) -> int:
        """Open the subdirectory ``part`` of ``fd``, never through a symlink nor onto a
        pseudo file system."""
        child = self._open_dir(fd, part, path, create)
        try:
            _refuse_pseudo(child, repr(path))
        except BaseException:
            os.close(child)
            raise
        return child

    def _open_dir(self, fd: int, part: str, path: str, create: bool) -> int:
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise ToolError(f"{path!r} does not exist") from None
        except OSError as exc:
            raise self._denied_or_missing(exc, path) from None
        try:
            os.mkdir(part, 0o755, dir_fd=fd)
            return os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            raise self._denied_or_missing(exc, path) from None

    @staticmethod
    def _denied_or_missing(exc: OSError, path: str) -> ToolError:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            return ToolDeniedError(
                f"access denied to {path!r}: a component is a symbolic link or not a directory"
            )
        if exc.errno == errno.ENOENT:
            return ToolError(f"{path!r} does not exist")
        if exc.errno == errno.ENAMETOOLONG:
            return ToolDeniedError(f"access denied to {path!r}: the path is too long")
        return ToolError(f"cannot open {path!r}: {exc.strerror}")


def _refuse_pseudo(fd: int, what: str) -> None:
    """``ToolDeniedError`` when ``fd`` is on a pseudo file system (procfs, sysfs…)."""
    fstype = pseudo_type_of_fd(fd)
    if fstype is not None:
        raise ToolDeniedError(
            f"access denied to {what}: it is on a {fstype} file system, which holds the "
            "kernel's state, not files"
        )
