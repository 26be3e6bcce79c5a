"""The zygote's heap collapsed into huge pages: the memory is the same before and after, a forked child's
writes stay its own, and on a kernel with MADV_COLLAPSE the pages really are huge afterwards."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from docfence.sandbox.heap import HUGE, _anonymous_ranges, collapse_anonymous_memory


def _anon_huge_kib() -> int:
    with open("/proc/self/smaps_rollup", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    return 0


def _in_child(body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run `body` in a forked child (the test process's own memory stays as it is); its JSON answer."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            os.write(w, json.dumps(body()).encode())
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return dict(json.loads(data))


def test_ranges_are_whole_aligned_huge_pages_of_private_anonymous_memory() -> None:
    ranges = _anonymous_ranges()
    assert ranges  # a Python process always has some
    for start, end in ranges:
        assert start % HUGE == 0 and end % HUGE == 0 and end > start


def test_collapsed_memory_keeps_its_content_and_a_fork_still_copies_on_write() -> None:
    def body() -> dict[str, Any]:
        block = bytearray(os.urandom(1024)) * (24 * 1024)  # 24 MiB, every page written
        before = bytes(block[::4096])
        huge_before = _anon_huge_kib()
        collapsed = collapse_anonymous_memory()
        child_saw = _in_child(lambda: _flip_every_page(block, before))
        return {"collapsed": collapsed, "huge_gain_kib": _anon_huge_kib() - huge_before,
                "same": bytes(block[::4096]) == before, "child": child_saw,
                "supported": _kernel_collapses()}

    seen = _in_child(body)
    assert seen["same"] is True  # the parent's bytes, after its child wrote over its copy
    assert seen["child"] == {"flipped": True}  # the child's own copy changed
    if seen["supported"]:
        assert int(seen["collapsed"]) >= 16 * HUGE  # most of the 24 MiB block, whatever its alignment
        assert int(seen["huge_gain_kib"]) >= 16 * HUGE // 1024
    else:
        assert seen["collapsed"] == 0


def _flip_every_page(block: bytearray, before: bytes) -> dict[str, Any]:
    for at in range(0, len(block), 4096):
        block[at] ^= 0xFF
    return {"flipped": bytes(block[::4096]) == bytes(b ^ 0xFF for b in before)}


def _kernel_collapses() -> bool:
    """Linux 6.1+ knows MADV_COLLAPSE; older kernels (or transparent huge pages set to "never") refuse."""
    release = tuple(int(x) for x in os.uname().release.split(".")[:2] if x.isdigit())
    with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="ascii") as fh:
        never = "[never]" in fh.read()
    return release >= (6, 1) and not never
