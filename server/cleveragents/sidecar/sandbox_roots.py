"""Which directories a run may use as its ``sandbox_root``: the operator's, never the sidecar's.

A client names a run's sandbox root; the sidecar resolves it once, at run start (symlinks and
all, ``os.path.realpath``), and the run uses the resolved directory from then on. It must lie
inside one of the ``sandbox_roots`` setting's entries, else ``PERMISSION_DENIED`` naming the
setting. Whatever that setting says, these are refused too: ``/``, the sidecar's working
directory or a directory above it, a directory holding the sidecar's own token, TLS key or
run store, and a directory on a pseudo file system (procfs, sysfs, devfs, cgroup…) or with one
mounted anywhere below it, checked by file system type from ``/proc/self/mountinfo``, not
by path. The entries themselves are resolved once, when the sidecar starts. A relative root
is ``INVALID_ARGUMENT``; one that is not a directory is
``FAILED_PRECONDITION``.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import SidecarError

if TYPE_CHECKING:
    from cleveragents.sandbox.filesystems import Mount

__all__ = ["SandboxRoots"]

_GLOB_CHARS = frozenset("*?[")
_FIELD = "context.sandbox_root"


class SandboxRoots:
    """The sandbox-root policy of one sidecar, from its configuration."""

    def __init__(self, config: SidecarConfig, *, cwd: str | None = None) -> None:
        self.patterns = config.sandbox_roots
        #: Each entry as path components to match, its literal part resolved once, here.
        self._wanted = [_components(pattern) for pattern in self.patterns]
        self.cwd = os.path.realpath(cwd if cwd is not None else os.getcwd())
        own = [config.auth.token_file, config.tls.key_file, config.store.url]
        own += [client.token_file for client in config.clients.values()]
        self.own_files = tuple(os.path.realpath(path) for path in own if path)

    def resolve(self, root: str | None) -> str | None:
        """The directory a run asking for ``root`` gets (``None``: none asked for), resolved;
        ``SidecarError`` says why it is refused."""
        if not root:
            return None
        if "\x00" in root or not os.path.isabs(root):
            raise SidecarError.invalid(f"{_FIELD} must be an absolute path, got {root[:200]!r}")
        resolved = os.path.realpath(root)
        # Only the client's own words: where a refused path leads (/proc/self/fd/3, say)
        # would tell it about the sidecar's host.
        shown = repr(root) if resolved == root else f"{root!r} (its links followed)"
        if not os.path.isdir(resolved):
            raise SidecarError.failed_precondition(f"{_FIELD} {shown} is not a directory")
        if resolved == "/":
            raise SidecarError.denied(f"{_FIELD} {shown} is the file system root, never allowed")
        if _within(self.cwd, resolved):
            raise SidecarError.denied(
                f"{_FIELD} {shown} holds the sidecar's working directory, never allowed"
            )
        if any(_within(path, resolved) for path in self.own_files):
            raise SidecarError.denied(
                f"{_FIELD} {shown} holds the sidecar's own token, TLS key or run store (or an "
                "identity's token file), never allowed"
            )
        self._check_filesystems(resolved, shown)
        have = [p for p in resolved.split("/") if p]
        if not any(_matches(have, wanted) for wanted in self._wanted):
            allowed = ", ".join(self.patterns) if self.patterns else "none"
            raise SidecarError.denied(
                f"{_FIELD} {shown} is not inside this sidecar's sandbox_roots ({allowed}); "
                "the operator sets which directories runs may use"
            )
        return resolved

    @staticmethod
    def _check_filesystems(resolved: str, shown: str) -> None:
        # The mount table's reader, only once a run asks for a sandbox root.
        from cleveragents.sandbox.filesystems import longest_mount, mounts

        try:
            table = mounts()
        except OSError as exc:
            raise SidecarError.denied(
                f"{_FIELD} {shown}: its file system type cannot be checked (/proc/self/"
                f"mountinfo: {exc.strerror}), so it is refused"
            ) from None
        device = os.stat(resolved).st_dev
        holder = next((m for m in table if m.device == device and m.pseudo), None)
        holder = holder or longest_mount(resolved, table)
        if holder is not None and holder.pseudo:
            raise SidecarError.denied(
                f"{_FIELD} {shown} is on a {holder.fstype} file system, which holds the "
                "kernel's state, never allowed"
            )
        below = _pseudo_below(resolved, table)
        if below is not None:
            raise SidecarError.denied(
                f"{_FIELD} {shown} has a {below.fstype} file system mounted inside it, at "
                f"{below.point!r}, never allowed"
            )


def _pseudo_below(resolved: str, table: Sequence[Mount]) -> Mount | None:
    prefix = resolved.rstrip("/") + "/"
    return next((m for m in table if m.pseudo and m.point.startswith(prefix)), None)


def _within(path: str, directory: str) -> bool:
    """Whether ``path`` is ``directory`` or lies below it (both resolved)."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _components(pattern: str) -> list[str]:
    """``pattern`` as components: a component with ``*``, ``?`` or ``[`` matches one path
    component; the literal part before the first such one is resolved (so ``/tmp/x`` works
    through a symlinked ``/tmp``)."""
    parts = [p for p in pattern.split("/") if p]
    literal = 0
    while literal < len(parts) and not (_GLOB_CHARS & set(parts[literal])):
        literal += 1
    base = os.path.realpath("/" + "/".join(parts[:literal]))
    return [p for p in base.split("/") if p] + parts[literal:]


def _matches(have: list[str], wanted: list[str]) -> bool:
    """Whether the path ``have`` is a directory ``wanted`` names, or lies below one."""
    if len(have) < len(wanted):
        return False
    return all(fnmatch.fnmatchcase(h, w) for h, w in zip(have, wanted, strict=False))
