"""The warm zygote's heap laid out for cheap forks: its anonymous memory collapsed into huge pages, so
each fork copies one page-table entry per 2 MiB instead of 512 (Linux 6.1+ MADV_COLLAPSE; where the
kernel cannot, nothing changes)."""

# A fork copies the page tables of every populated page: the warm heap (imports, parsed fonts, caches)
# is ~75 MiB, ~19,000 entries, ~5 ms of the zygote's CPU per render process on a VM; collapsed, ~2 ms.
# MADV_COLLAPSE does not depend on the machine's transparent-huge-page setting. A render process that
# writes into a collapsed page still gets its own copy of that 4 KiB page only (the kernel splits the
# huge page's mapping first).

from __future__ import annotations

import ctypes
from collections.abc import Iterable

from docfence.sandbox.protocol import libc

HUGE = 2 * 1024 * 1024
_MADV_COLLAPSE = 25  # include/uapi/asm-generic/mman-common.h
_NOT_HEAP = (b"[stack]", b"[vvar]", b"[vdso]", b"[vsyscall]", b"[vvar_vclock]")


def collapse_anonymous_memory() -> int:
    """Collapse this process's private anonymous writable memory into huge pages where whole aligned
    2 MiB ranges exist; returns the bytes collapsed (0 where the kernel refuses or cannot)."""
    madvise = libc().madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    collapsed = 0
    with open("/proc/self/maps", "rb") as maps:  # bytes: a mapped file's name may be in any encoding
        ranges = anonymous_ranges(maps)
    for start, end in ranges:
        if madvise(start, end - start, _MADV_COLLAPSE) == 0:
            collapsed += end - start
    return collapsed


def anonymous_ranges(maps_lines: Iterable[bytes]) -> list[tuple[int, int]]:
    """(start, end) of each private anonymous read-write mapping among /proc/PID/maps lines, cut to
    whole aligned huge pages."""
    ranges = []
    for line in maps_lines:
        fields = line.split(maxsplit=5)
        perms, name = fields[1], fields[5].strip() if len(fields) > 5 else b""
        private_rw = perms.startswith(b"rw") and perms[3:4] == b"p"
        if not private_rw or name.startswith(b"/") or name in _NOT_HEAP:  # a file, shared, a stack
            continue
        low, high = (int(x, 16) for x in fields[0].split(b"-"))
        start, end = -(-low // HUGE) * HUGE, high // HUGE * HUGE
        if end > start:
            ranges.append((start, end))
    return ranges
