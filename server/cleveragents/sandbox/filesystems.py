"""Which mounted file systems are pseudo file systems (procfs, sysfs, devfs, cgroup…).

Their files are the kernel's view of processes and devices, not data: ``/proc/self/environ``
holds the sidecar's keys and token. The type is read from ``/proc/self/mountinfo`` (each
mount's device number, mount point and type), so a procfs bind-mounted anywhere, under any
name, is still procfs. File tools check each descriptor they open by its device number; the
sidecar checks a run's sandbox root, and every mount below it, when the run starts.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "PSEUDO_FILESYSTEMS",
    "Mount",
    "is_pseudo_device",
    "longest_mount",
    "mounts",
    "parse_mountinfo",
    "pseudo_type_of_fd",
]

#: File system types whose files are the kernel's state rather than stored data.
PSEUDO_FILESYSTEMS = frozenset(
    {
        "proc", "sysfs", "devtmpfs", "devfs", "devpts", "cgroup", "cgroup2", "debugfs",
        "tracefs", "securityfs", "configfs", "fusectl", "pstore", "bpf", "efivarfs",
        "mqueue", "binfmt_misc", "autofs", "rpc_pipefs", "nsfs", "selinuxfs", "hugetlbfs",
        "nfsd", "smackfs", "apparmorfs",
    }
)  # fmt: skip
_MOUNTINFO = "/proc/self/mountinfo"


@dataclass(frozen=True, slots=True)
class Mount:
    """One line of ``/proc/self/mountinfo``: the device number, mount point and type."""

    device: int
    point: str
    fstype: str

    @property
    def pseudo(self) -> bool:
        """Whether the kernel, not a disk, provides this file system's files."""
        return self.fstype in PSEUDO_FILESYSTEMS


def mounts() -> tuple[Mount, ...]:
    """The mounts this process sees now; ``OSError`` when the table cannot be read."""
    return _table.current()


def parse_mountinfo(text: str) -> tuple[Mount, ...]:
    """The mounts listed in ``text``, the contents of a ``mountinfo`` file."""
    return tuple(m for line in text.splitlines() if (m := _parse(line)) is not None)


class _MountTable:
    """``/proc/self/mountinfo``, read again only when the kernel says it changed: the file
    reports ``POLLPRI``/``POLLERR`` to ``poll`` after a mount or unmount (proc(5)). Reading
    and parsing it costs 0.3-1 ms, a poll a few microseconds, and runs start often."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._poll: select.poll | None = None
        self._mounts: tuple[Mount, ...] = ()

    def current(self) -> tuple[Mount, ...]:
        with self._lock:
            if self._fd is None:
                self._fd = os.open(_MOUNTINFO, os.O_RDONLY | os.O_CLOEXEC)
                self._poll = select.poll()
                self._poll.register(self._fd, select.POLLPRI | select.POLLERR)
                self._mounts = self._read(self._fd)
            elif self._poll is not None and self._poll.poll(0):
                self._mounts = self._read(self._fd)
            return self._mounts

    @staticmethod
    def _read(fd: int) -> tuple[Mount, ...]:
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return parse_mountinfo(b"".join(chunks).decode("utf-8", "surrogateescape"))


_table = _MountTable()


def _parse(line: str) -> Mount | None:
    fields = line.split()
    try:
        dash = fields.index("-", 6)
        major, minor = fields[2].split(":")
        device = os.makedev(int(major), int(minor))
        point = _unescape(fields[4])
        fstype = fields[dash + 1]
    except (ValueError, IndexError):
        return None
    return Mount(device, point, fstype)


def _unescape(field: str) -> str:
    """Mount points escape space, tab, newline and backslash as octal (``\\040``)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


class _Devices:
    """Device number → file system type, from the mount table as it is now: the table is
    re-read whenever the kernel says it changed (``_MountTable``), and the map with it, so a
    device number an unmount freed and a new mount took again is not taken for the old one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._source: tuple[Mount, ...] | None = None
        self._types: dict[int, str] = {}

    def fstype(self, device: int) -> str:
        try:
            table = mounts()
        except OSError:
            table = ()
        with self._lock:
            if table is not self._source:
                self._types = {m.device: m.fstype for m in table}
                self._source = table
            return self._types.get(device, "")


_devices = _Devices()


def is_pseudo_device(device: int) -> bool:
    """Whether ``device`` (an ``st_dev``) is a mounted pseudo file system."""
    return _devices.fstype(device) in PSEUDO_FILESYSTEMS


def pseudo_type_of_fd(fd: int) -> str | None:
    """The pseudo file system type ``fd`` is on, or ``None`` for ordinary storage."""
    fstype = _devices.fstype(os.fstat(fd).st_dev)
    return fstype if fstype in PSEUDO_FILESYSTEMS else None


def longest_mount(path: str, table: Sequence[Mount]) -> Mount | None:
    """The mount that holds ``path`` (an absolute, resolved path): the deepest mount point."""
    best: Mount | None = None
    for mount in table:
        point = mount.point
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best.point)):
            best = mount
    return best
