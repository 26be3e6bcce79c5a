"""Process-tree facts from /proc for tests of the sandbox: whose children, still running or gone."""

from __future__ import annotations

from pathlib import Path


def children(pid: int) -> list[int]:
    """Direct children of `pid` (every thread's list), [] once it is gone."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return found


def running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (a killed child not yet reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for child in children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def zygotes_under(pid: int) -> list[int]:
    """The sandbox zygotes started by `pid` (told apart from other children by their command line)."""
    return [child for child in children(pid) if _is_zygote_image(child)]


def render_processes(zygote: int) -> list[int]:
    """The zygote's forked render processes (not helpers its imports may run, e.g. a compiler probe
    of ctypes.util while it warms up): they share its command line."""
    return [child for child in children(zygote) if _is_zygote_image(child)]


def _is_zygote_image(pid: int) -> bool:
    try:
        return b"docfence.sandbox.zygote" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
