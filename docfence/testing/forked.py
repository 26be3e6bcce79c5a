"""A test body run in a forked child, so what it does to its own process (confining it, collapsing its
memory) never reaches the test process; the body's JSON answer comes back through a pipe."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any


def in_forked_child(body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`body()` run in a forked child; asserts that the child exited 0 (an exception in it exits 70)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
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
    assert os.waitstatus_to_exitcode(status) == 0, "the forked test body failed"
    return dict(json.loads(data))
