"""The zygote's heap collapsed into huge pages: only private anonymous memory is chosen, a block of it
really becomes huge pages where the kernel can collapse (probed, not guessed from its version), its
content stays, and a forked child's writes stay the child's."""

from __future__ import annotations

import ctypes
import errno
import mmap
import tempfile
from typing import Any

from docfence.sandbox.heap import HUGE, _anonymous_ranges, collapse_anonymous_memory
from docfence.sandbox.protocol import libc
from docfence.testing.forked import in_forked_child

MADV_COLLAPSE = 25


def _private_block(size: int) -> tuple[mmap.mmap, int]:
    block = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for at in range(0, size, mmap.PAGESIZE):
        block[at] = (at // mmap.PAGESIZE) % 251 + 1
    return block, ctypes.addressof(ctypes.c_char.from_buffer(block))


def _huge_kib_of(address: int) -> int:
    """AnonHugePages of the mapping that holds `address` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps", "rb") as fh:
        for line in fh:
            head = line.split(maxsplit=1)[0]
            if b"-" in head and not head.endswith(b":"):
                low, high = (int(x, 16) for x in head.split(b"-"))
                inside = low <= address < high
            elif inside and head == b"AnonHugePages:":
                return int(line.split()[1])
    return 0


def _kernel_collapses() -> bool:
    """MADV_COLLAPSE on a fresh, aligned, populated 2 MiB range: EINVAL where the kernel lacks it."""
    block, address = _private_block(2 * HUGE)
    start = -(-address // HUGE) * HUGE
    madvise = libc().madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    ok = madvise(start, HUGE, MADV_COLLAPSE) == 0
    failure = ctypes.get_errno()
    block.close()
    return ok or failure not in (errno.EINVAL, errno.ENOSYS)


def test_only_private_anonymous_read_write_memory_is_chosen() -> None:
    def body() -> dict[str, Any]:
        private, private_at = _private_block(8 * HUGE)
        shared = mmap.mmap(-1, 8 * HUGE)  # MAP_SHARED
        shared_at = ctypes.addressof(ctypes.c_char.from_buffer(shared))
        with tempfile.TemporaryFile() as fh:
            fh.truncate(8 * HUGE)
            backed = mmap.mmap(fh.fileno(), 8 * HUGE, flags=mmap.MAP_PRIVATE)
            backed_at = ctypes.addressof(ctypes.c_char.from_buffer(backed))
            ranges = _anonymous_ranges()

            def chosen(at: int) -> bool:
                return any(start <= at + 4 * HUGE < end for start, end in ranges)

            answer = {"private": chosen(private_at), "shared": chosen(shared_at), "file": chosen(backed_at),
                      "aligned": all(s % HUGE == 0 and e % HUGE == 0 and e > s for s, e in ranges)}
            backed.close()
        private.close()
        shared.close()
        return answer

    assert in_forked_child(body) == {"private": True, "shared": False, "file": False, "aligned": True}


def test_a_collapsed_block_is_huge_keeps_its_content_and_forks_copy_on_write() -> None:
    def body() -> dict[str, Any]:
        block, address = _private_block(12 * HUGE)
        before = bytes(block[::mmap.PAGESIZE])
        collapsed = collapse_anonymous_memory()
        huge_kib = _huge_kib_of(address)
        child = in_forked_child(lambda: _flip_every_page(block, before))
        return {"collapsed": collapsed, "huge_kib": huge_kib, "same": bytes(block[::mmap.PAGESIZE]) == before,
                "child": child, "supported": _kernel_collapses()}

    seen = in_forked_child(body)
    assert seen["same"] is True  # the parent's bytes, after its child wrote over its own copy
    assert seen["child"] == {"flipped": True}
    if seen["supported"]:
        assert seen["collapsed"] >= 10 * HUGE and seen["huge_kib"] >= 10 * HUGE // 1024  # all but the ends
    else:
        assert seen["collapsed"] == 0


def _flip_every_page(block: mmap.mmap, before: bytes) -> dict[str, Any]:
    for at in range(0, len(block), mmap.PAGESIZE):
        block[at] ^= 0xFF
    return {"flipped": bytes(block[::mmap.PAGESIZE]) == bytes(b ^ 0xFF for b in before)}
