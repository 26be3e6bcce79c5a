"""The zygote's heap collapsed into huge pages: only private anonymous memory is chosen, a block of it
really becomes huge pages where the kernel can collapse (probed, not guessed from its version), its
content stays, and a forked child's writes stay the child's."""

from __future__ import annotations

import ctypes
import errno
import mmap
import tempfile
from typing import Any

from docfence.sandbox.heap import HUGE, anonymous_ranges, collapse_anonymous_memory
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


def _kernel_collapses() -> str:
    """MADV_COLLAPSE on a fresh, aligned, populated 2 MiB range: "yes"; "no" where the kernel lacks it
    (EINVAL); "busy" where it has it but found no free huge page just now (EAGAIN, ENOMEM: a loaded
    machine with fragmented memory)."""
    block, address = _private_block(2 * HUGE)
    start = -(-address // HUGE) * HUGE
    madvise = libc().madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    ok = madvise(start, HUGE, MADV_COLLAPSE) == 0
    failure = ctypes.get_errno()
    block.close()
    if ok:
        return "yes"
    return "no" if failure in (errno.EINVAL, errno.ENOSYS) else "busy"


def test_maps_lines_choose_private_anonymous_read_write_memory_only() -> None:
    maps = [
        b"00200000-00800000 rw-p 00000000 00:00 0 \n",  # anonymous, private: chosen, whole
        b"00a00000-00e00000 rw-s 00000000 00:00 0 \n",  # anonymous but shared
        b"01000000-01400000 rw-p 00000000 fd:01 42 /usr/lib/libx.so\n",  # a file's private copy
        b"01600000-01a00000 rw-p 00000000 fd:01 43 /srv/Schriftart-\xe4\xff.ttf\n",  # not UTF-8
        b"01c00000-02000000 r--p 00000000 00:00 0 \n",  # read-only
        b"7ffd00000000-7ffd00400000 rw-p 00000000 00:00 0 [stack]\n",
        b"02100000-02700000 rw-p 00000000 00:00 0 [heap]\n",  # cut to 0x2200000-0x2600000
        b"02800000-02900000 rw-p 00000000 00:00 0 [anon:python]\n",  # no whole huge page
    ]
    assert anonymous_ranges(maps) == [(0x200000, 0x800000), (0x2200000, 0x2600000)]


def test_the_process_maps_include_a_private_block_and_no_file_mapping() -> None:
    def body() -> dict[str, Any]:
        private, private_at = _private_block(8 * HUGE)
        with tempfile.TemporaryFile() as fh:
            fh.truncate(8 * HUGE)
            backed = mmap.mmap(fh.fileno(), 8 * HUGE, flags=mmap.MAP_PRIVATE)
            backed_at = ctypes.addressof(ctypes.c_char.from_buffer(backed))
            with open("/proc/self/maps", "rb") as maps:
                ranges = anonymous_ranges(maps)

            def chosen(at: int) -> bool:
                return any(start <= at + 4 * HUGE < end for start, end in ranges)

            answer = {"private": chosen(private_at), "file": chosen(backed_at)}
            backed.close()
        private.close()
        return answer

    assert in_forked_child(body) == {"private": True, "file": False}


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
    if seen["supported"] == "yes":
        assert seen["collapsed"] >= 10 * HUGE and seen["huge_kib"] >= 10 * HUGE // 1024  # all but the ends
    elif seen["supported"] == "no":
        assert seen["collapsed"] == 0
    # "busy": no free huge page just now; the content and copy-on-write checks above still hold


def _flip_every_page(block: mmap.mmap, before: bytes) -> dict[str, Any]:
    for at in range(0, len(block), mmap.PAGESIZE):
        block[at] ^= 0xFF
    return {"flipped": bytes(block[::mmap.PAGESIZE]) == bytes(b ^ 0xFF for b in before)}
