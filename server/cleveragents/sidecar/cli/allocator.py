"""The C allocator of a ``serve`` process: large blocks go back to the system when freed.

glibc serves a block of 128 KiB or more with its own ``mmap`` (returned at ``free``), but it
raises that threshold to the size of each such block freed, up to 32 MiB. After one large
request, every later multi-MiB copy (a request being parsed, a prompt decoded, a response
encoded) then comes from the heap, and the heap keeps the freed space: a sidecar that kept
8 MiB prompts grew by about 23 MiB a run instead of about 10. A fixed threshold stops that.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["MMAP_THRESHOLD", "return_large_blocks"]

#: Blocks this large or larger are mapped on their own and unmapped when freed.
MMAP_THRESHOLD = 1024 * 1024
#: ``mallopt``'s parameter number for the threshold (glibc's ``malloc.h``).
_M_MMAP_THRESHOLD = -3


def return_large_blocks(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold``; ``False`` where there is no glibc."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))
