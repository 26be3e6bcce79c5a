"""How a zygote stops without any signal handler raising: SIGTERM only sets a flag (Term), the warm-up
looks at it at checkpoints between its phases (Stop is raised there, by ordinary code), and the serve
loop after each wake-up. Also the test hook that names each point and stops the zygote at one."""

from __future__ import annotations

import os
import signal


class Stop(BaseException):
    """Raised by `checkpoint` (ordinary code, never a signal handler) when SIGTERM has asked the zygote
    to stop: the warm-up unwinds from a point between two of its phases. A BaseException, so the
    phases' `suppress(Exception)` does not swallow it."""


class Term:
    """What SIGTERM has asked. The handler only sets `wanted` (and, once the zygote serves, Python's
    wake-up byte wakes its loop): it never raises, so nothing it does can land inside a library's
    finalizer, a fork, a reap or a shutdown. The warm-up looks at the flag between its phases (each a
    fraction of a second), the serve loop after every wake-up."""

    wanted = False


def on_term(*_: object) -> None:
    Term.wanted = True


# Test-only hook (inert unless DOCFENCE_ZYGOTE_TRACE is set, see install_test_hook): each point the
# zygote passes is appended to that file ("check NAME" for a checkpoint, "mark NAME" for a mark), and at
# the one DOCFENCE_ZYGOTE_TERM_AT names the zygote sends itself SIGTERM, before a checkpoint's look at
# the flag ("NAME") or after it ("after:NAME": the signal then comes during the phase that follows), so
# a test can stop it at each point of its warm-up and shutdown in turn, with a real signal.
_TRACE: str | None = None
_TERM_AT: str | None = None


def install_test_hook() -> None:
    global _TRACE, _TERM_AT
    _TRACE = os.environ.get("DOCFENCE_ZYGOTE_TRACE") or None
    _TERM_AT = os.environ.get("DOCFENCE_ZYGOTE_TERM_AT") or None


def _hook(kind: str, name: str) -> None:
    if _TRACE is None:
        return
    if kind != "after":
        with open(_TRACE, "a", encoding="utf-8") as fh:  # O_APPEND: one whole line per point
            fh.write(f"{kind} {name}\n")
    wanted_here = f"after:{name}" if kind == "after" else name
    if wanted_here == _TERM_AT:
        os.kill(os.getpid(), signal.SIGTERM)  # a real signal; its handler runs before kill returns


def mark(name: str) -> None:
    """A named point of the zygote's life, for the test hook only (nothing stops here)."""
    _hook("mark", name)


def checkpoint(name: str) -> None:
    """Between two warm-up phases: raises Stop when SIGTERM has asked the zygote to stop. Ordinary
    code, so the unwinding starts here, never inside whatever the signal interrupted."""
    _hook("check", name)
    if Term.wanted:
        raise Stop
    _hook("after", name)
