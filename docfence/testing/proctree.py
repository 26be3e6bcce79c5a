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


def environ(pid: int) -> dict[bytes, bytes]:
    """The environment `pid` was started with (/proc/PID/environ)."""
    with open(f"/proc/{pid}/environ", "rb") as fh:
        return dict(item.partition(b"=")[::2] for item in fh.read().split(b"\0") if item)


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
    """The sandbox zygotes started by `pid` (they name themselves, see sandbox.protocol)."""
    return [child for child in children(pid) if _name(child) == "docfence-zygote"]


def render_processes(zygote: int) -> list[int]:
    """The zygote's render processes (named by themselves right after the fork; helpers its imports
    may run while it warms up, e.g. ctypes.util's compiler probe, are not counted)."""
    return [child for child in children(zygote) if _name(child) == "docfence-render"]


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
