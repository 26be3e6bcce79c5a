"""The warm zygote: imported the engines, parsed the fonts and ran a sample job once, then forks one
fresh child per task (copy-on-write, no imports in the child) and reports each child's end.

Started by `Sandbox` as its own interpreter, `python -m docfence.sandbox.zygote --parent PID --fd N` run
with the parent's own docfence package (core/interpreter.py), N being its end of the control socket.
Single-threaded on purpose (fork and threads do not mix).
Control messages: {"op": "run", "token", "request"} with the task's socket attached (and the read
end of its secrets pipe, which only the child reads), {"op": "kill", "token"}. On a task's socket
it sends {"pid"} after the fork (or {"fork_failed": errno} when the kernel refuses one) and
{"exit": wait status} after reaping; the child itself sends {"pages"} and {"answered"}. It dies with
its parent (PR_SET_PDEATHSIG), and its children die with it, so no render process outlives the
process that asked for it; each child leads its own process group, which the zygote (their subreaper)
kills when the child ends, so nothing a child started outlives it either, and has a process limit
counted for it alone, so it cannot fork without bound (inherit.py). Each child confines itself
(confine.py) before it reads its document.
SIGTERM only sets a flag (stopping.py): the warm-up stops at its next checkpoint, the serve loop at its next
wake-up, then the zygote shuts its children down; no signal handler here ever raises.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import resource
import secrets
import selectors
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from docfence.core.policy import Mode
from docfence.sandbox import inherit, protocol
from docfence.sandbox.confine import Confinement, ConfinementFailed, confine, prepare
from docfence.sandbox.heap import collapse_anonymous_memory
from docfence.sandbox.scratch import hold, remove_orphans
from docfence.sandbox.stopping import Stop as _Stop
from docfence.sandbox.stopping import Term as _Term
from docfence.sandbox.stopping import checkpoint, install_test_hook, mark
from docfence.sandbox.stopping import on_term as _on_term

_TMP_BASE = tempfile.gettempdir()  # the zygote's, before a child points TMPDIR at its own folder
RENDER_TMP_PREFIX = "docfence-render-"  # + the render process's pid (scratch.remove_orphans)


class Zygote:
    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self.children: dict[int, tuple[str, socket.socket]] = {}  # pid -> (token, task socket)
        self.by_token: dict[str, int] = {}
        self._wake_r, self._wake_w = os.pipe()
        self._devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)  # each child's stdin/out/err
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)

    def serve(self, steps: tuple[Callable[[], None], ...], idle_s: float = 0.0) -> None:
        """Fork a child per request until the parent goes; run `steps` (warm-up) one at a time whenever
        no request or child exit has come for `idle_s`."""
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up fd is written
        signal.set_wakeup_fd(self._wake_w)
        sel = selectors.DefaultSelector()
        sel.register(self.control, selectors.EVENT_READ, "control")
        sel.register(self._wake_r, selectors.EVENT_READ, "sigchld")
        with contextlib.suppress(_Stop):  # asked to stop, seen at a checkpoint
            checkpoint("ready")  # told to stop while warming: the parent has closed our socket
            with contextlib.suppress(OSError):
                protocol.send(self.control, {"ready": os.getpid()})
            self._loop(sel, list(steps), idle_s)
        self._shutdown()

    def _loop(self, sel: selectors.BaseSelector, later: list[Callable[[], None]], idle_s: float) -> None:
        """Until the parent goes (end of stream) or SIGTERM comes; the caller then shuts down."""
        while not _Term.wanted:
            events = sel.select(idle_s if later else None)
            if _Term.wanted:
                return
            if not events and later:  # idle a while: one more warm-up step (a task arriving waits for it)
                checkpoint(f"later-{len(later)}")
                later.pop(0)()
                if not later:
                    checkpoint("later-freeze")
                    _freeze()
                    mark("later-done")
                continue
            for key, _ in events:
                if key.data == "sigchld":
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                    self._reap()
                elif not self._control():
                    return

    def _control(self) -> bool:
        try:
            message, fds = protocol.receive(self.control)
        except ValueError:  # not a message of ours: its descriptors are closed, the loop goes on
            return True
        except (ConnectionError, OSError):
            return False
        if message is None:
            return False
        token, request = message.get("token"), message.get("request")
        if message.get("op") == "run" and len(fds) in (1, 2) and isinstance(token, str) \
                and isinstance(request, dict):
            secrets_fd = fds[1] if len(fds) == 2 else None  # never read here: the child's alone
            self._fork(token, socket.socket(fileno=fds[0]), request, secrets_fd)
        elif message.get("op") == "kill":
            pid = self.by_token.get(message.get("token", ""))
            if pid is not None:  # not reaped yet, so the pid is still this child's
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        else:
            for fd in fds:
                os.close(fd)
        return True

    def _fork(self, token: str, task: socket.socket, request: dict[str, Any], secrets_fd: int | None) -> None:
        """One render process for the task. A fork the kernel refuses (EAGAIN: the user's process limit;
        ENOMEM) is that task's answer, {"fork_failed": errno} (retryable), never the zygote's end. The
        task's secrets descriptor is closed here in every case: the next child must not inherit it."""
        mark("fork")
        try:
            pid = os.fork()
        except OSError as exc:
            if secrets_fd is not None:
                os.close(secrets_fd)
            with contextlib.suppress(OSError):
                protocol.send(task, {"fork_failed": exc.errno or 0})
            task.close()
            return
        if pid == 0:
            _child(task, request, os.getppid(), secrets_fd, self._devnull)  # never returns
        inherit.own_group(pid)  # as the child does: the group exists before either side goes on
        if secrets_fd is not None:
            os.close(secrets_fd)
        self.children[pid] = (token, task)
        self.by_token[token] = pid
        with contextlib.suppress(OSError):
            protocol.send(task, {"pid": pid})

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            mark("reap")
            token, task = self.children.pop(pid, ("", None))
            self.by_token.pop(token, None)
            if task is not None:  # a render process: what it started dies with it; those (and an
                inherit.kill_group(pid)  # orphan it left, adopted by us) are reaped by this loop too
            shutil.rmtree(private_tmp(pid), ignore_errors=True)  # a killed child could not
            if task is not None:
                with contextlib.suppress(OSError):
                    protocol.send(task, {"exit": status})
                task.close()

    def _shutdown(self) -> None:
        mark("shutdown")
        for pid in list(self.children):
            inherit.kill_group(pid)  # the render process and everything it started
        mark("shutdown-killed")
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            # a child killed while it emptied its folder (it had answered, the parent was done) leaves
            # a copy of its document there: removed here as _reap does
            shutil.rmtree(private_tmp(pid), ignore_errors=True)
        self.children.clear()
        self.by_token.clear()
        mark("shutdown-done")


def _child(task: socket.socket, request: dict[str, Any], zygote: int, secrets_fd: int | None,
           devnull: int) -> None:
    """In the fresh child: its own process group, drop the zygote's handlers and descriptors (all but the
    task's: inherit.keep_only), set limits, work, answer, exit.
    An exception of docfence's own code here (outside the task, which answers for itself) is answered
    as engine_error with its traceback (outcomes.from_exception); only when no answer can be written
    does the process exit 70 (render_crashed)."""
    code = 0
    cost = _Cost()
    try:
        inherit.own_group()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        protocol.die_with_parent(zygote)
        protocol.set_process_name(protocol.RENDER_NAME)
        inherit.keep_only({task.fileno()} | ({secrets_fd} if secrets_fd is not None else set()), devnull)
        _limit(request["memory_mb"], request["cpu_s"])
        inherit.limit_file_size(request["fsize_bytes"])
        from docfence.sandbox.work import run_task, unconfined

        processes: dict[str, Any] = {}
        try:
            processes = _limit_processes()  # before confine(): its filter denies set*uid and unshare
            confined: dict[str, Any] = _confine(request)
        except ConfinementFailed as exc:  # never run a task unconfined where the kernel can confine it
            confined, outcome = {}, unconfined(exc)
        cost.mark("setup")
        if confined:
            outcome = run_task(request, lambda pages: protocol.send(task, {"pages": pages}), secrets_fd)
        cost.mark("task")
        answer = {**outcome.to_message(),
                  "process": {"pid": os.getpid(), "token": secrets.token_hex(8), "confined": confined,
                              "processes": processes, **cost.report()}}
        _write_answer(request["answer"], answer)
        protocol.send(task, {"answered": True})
    except BaseException as exc:  # every ending must become an answer or an exit
        code = _answer_unexpected(task, request, exc)
    finally:
        shutil.rmtree(private_tmp(os.getpid()), ignore_errors=True)  # its content; the zygote removes it
        os._exit(code)  # never run the zygote's atexit handlers or flush its buffers


def _answer_unexpected(task: socket.socket, request: dict[str, Any], exc: BaseException) -> int:
    """Answer `exc` as its coded outcome (with its traceback); the exit code: 0 when answered, else 70
    (no answer: the parent maps the exit to render_crashed)."""
    from docfence.sandbox.outcomes import from_exception

    try:
        _write_answer(request["answer"], from_exception(exc).to_message())
        protocol.send(task, {"answered": True})
    except BaseException:  # the answer file or the socket is gone: exit without one
        return 70
    return 0


def private_tmp(pid: int) -> str:
    """The temporary folder of render process `pid` (its second reader's copies): the process empties it
    as it exits, the zygote removes it when it reaps the process (killed or not)."""
    return os.path.join(_TMP_BASE, f"{RENDER_TMP_PREFIX}{pid}")


def _limit_processes() -> dict[str, Any]:
    """RLIMIT_NPROC counted for this process alone (inherit.limit_processes): {"limit", "counted"}, where
    "counted" is "" when the machine offers no way to count it. Raises ConfinementFailed."""
    limit = inherit.process_limit()
    try:
        return {"limit": limit, "counted": inherit.limit_processes(limit)}
    except OSError as exc:  # a real uid of its own but capabilities that still exempt it: not run
        raise ConfinementFailed(f"process limit: {type(exc).__name__}") from exc


def _confine(request: dict[str, Any]) -> dict[str, Any]:
    """Private temporary folder, output and answer files created, then Landlock and seccomp
    (confine.py): what was applied. Raises ConfinementFailed."""
    tmp = private_tmp(os.getpid())
    shutil.rmtree(tmp, ignore_errors=True)  # a killed process of a reused pid left it
    os.mkdir(tmp, 0o700)
    hold(tmp)  # its lock, held until it exits: another zygote's sweep (remove_orphans) leaves it alone
    os.environ["TMPDIR"] = tempfile.tempdir = tmp
    for path in (request["output"], request["answer"]):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    hook_dir = os.environ.get("DOCFENCE_FAULTS_DIR") if os.environ.get("DOCFENCE_FAULTS") else None
    return confine(Confinement(read_files=(request["input"],),
                               write_files=(request["output"], request["answer"]),
                               private_dirs=(tmp, *([hook_dir] if hook_dir else []))))


class _Cost:
    """Where a render process's CPU goes, per step ("before": the fork's copy-on-write in the child,
    "setup": limits and descriptors, "task": the work): CPU ms of the process itself, CPU ms of the
    subprocesses it ran (validation's second reader: qpdf, pdfinfo) and minor page faults. Sent in
    the answer's "process" entry, so the per-job overhead is measured where it arises."""

    def __init__(self) -> None:
        self.steps: dict[str, tuple[float, int, float]] = {}
        self._last = self._now()
        self.steps["before"] = (self._last[0], self._last[1], 0.0)

    @staticmethod
    def _now() -> tuple[float, int, float]:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (ru.ru_utime + ru.ru_stime) * 1000.0, ru.ru_minflt, (kids.ru_utime + kids.ru_stime) * 1000.0

    def mark(self, step: str) -> None:
        now = self._now()
        self.steps[step] = (now[0] - self._last[0], now[1] - self._last[1], now[2] - self._last[2])
        self._last = now

    def report(self) -> dict[str, dict[str, float]]:
        return {"cpu_ms": {k: round(v[0], 2) for k, v in self.steps.items()},
                "minflt": {k: v[1] for k, v in self.steps.items()},
                "subprocess_cpu_ms": {k: round(v[2], 2) for k, v in self.steps.items()}}


def _write_answer(path: str, answer: dict[str, Any]) -> None:
    import json

    with open(path, "w", encoding="utf-8") as fh:
        json.dump(answer, fh)


def _limit(memory_mb: int, cpu_s: int) -> None:
    """RLIMIT_AS: what the warm process already maps plus the job's own memory; RLIMIT_CPU: SIGXCPU at
    the budget (mapped to render_resource_exceeded), SIGKILL a second later."""
    mapped = _vm_size_bytes()
    limit = mapped + memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))


def _vm_size_bytes() -> int:
    """This process's mapped size (VmSize), from /proc/self/statm's first field (pages): one raw read,
    no text layer (reading /proc/self/status line by line cost ~1 ms and ~190 page faults per job)."""
    fd = os.open("/proc/self/statm", os.O_RDONLY)
    try:
        return int(os.read(fd, 256).split()[0]) * os.sysconf("SC_PAGE_SIZE")
    finally:
        os.close(fd)


def warm(*, every_font: bool = True, marks: bool = True, arrays: bool = True) -> None:
    """What must be done before the first task: imports, fonts, the watermark layer and pdfium's own
    initialisation, by running a generated sample (no user data) through the vector engine. The rest
    (WARM_LATER) runs while the zygote is idle, so a restarted worker can start its first job sooner;
    a zygote for one command-line run skips it (main's --command-line), so in a batch of raster files
    each render process warms the raster stack itself; with `marks=False` it warms the default class's
    marks after its first fork (COMMAND_LINE_LATER). `every_font=False` parses only the first font,
    which draws every ASCII character (the text falls back to the next font only for a character the
    first lacks; a child needing one parses it); `arrays=False` leaves numpy to a raster job's child.
    Raises _Stop at a checkpoint between two phases when
    SIGTERM has come."""
    checkpoint("imports")  # one import between two checkpoints: a stop waits for ~0.1 s at most
    import pikepdf  # noqa: F401

    checkpoint("import-pil")
    import PIL.Image  # noqa: F401

    checkpoint("import-pdfium")
    import pypdfium2  # noqa: F401

    if arrays:  # the raster palette and colour proof's numpy (~0.1 s): a command-line zygote, whose
        checkpoint("import-numpy")  # job is most often vector, leaves it to a raster job's child
        import numpy  # noqa: F401

    checkpoint("import-engines")
    from docfence import faults  # noqa: F401  (the test hook every task passes through)
    from docfence.engines.outline_text import available_fonts
    from docfence.sandbox import work  # noqa: F401

    # every font before the first fork (~0.2 s, the CJK fallback most of it): a child forked earlier
    # would parse the CJK font itself whenever its text needs it, ~0.12 s and ~40 MB a job
    fonts = available_fonts()
    for number, font in enumerate(fonts if every_font else fonts[:1]):  # parsed once, shared by every child
        checkpoint(f"font-{number}")
        font.getBestCmap()
        font.getGlyphSet()
    checkpoint("sample-vector")
    _sample(Mode.VECTOR)
    if marks:
        _warm_marks(default_only=True)
    checkpoint("freeze")
    _freeze()


def _warm_marks(*, default_only: bool) -> None:
    """Run the configured document classes' policies (their watermark text, mode and validation) over
    one generated Letter and one A4 page, so the mark's outlines and the validator's coverage masks for
    those pages are cached in the zygote instead of being rebuilt by every render process (~5 ms per
    job). Settings come from the environment the zygote inherited; a job with other text or page sizes
    still works, it builds its own."""
    from docfence import engines
    from docfence.config import load_settings
    from docfence.samples import pdfs

    which = "default" if default_only else "all"
    with contextlib.suppress(Exception):  # only a cache: a bad configuration fails in its own jobs
        settings = load_settings()
        names = [settings.default_class] if default_only else list(settings.all_classes())
        for number, name in enumerate(names):
            policy = settings.policy_for(name)
            for paper, size in enumerate((pdfs.LETTER, pdfs.A4)):
                checkpoint(f"marks-{which}-{number}-{paper}")  # one page's job at most between two
                with contextlib.suppress(Exception):
                    engines.watermark_document(pdfs.many_pages(1, size), policy)


def _sample(mode: str) -> None:
    from docfence import engines
    from docfence.core.policy import JobPolicy
    from docfence.samples import pdfs

    with contextlib.suppress(Exception):  # a broken engine shows up in the first real job, coded
        engines.watermark_document(pdfs.links(), JobPolicy(mode=Mode(mode), dpi=72))


def _import_issue_stages() -> None:
    """The verification-code stage (segno, zxing-cpp) when a configured class uses it, so no render
    process pays its imports per job. Signing is warmed in the sign zygote only (_warm_sign): sign
    tasks never run here."""
    from docfence.config import load_settings

    with contextlib.suppress(Exception):  # only a cache, as in _warm_marks
        classes = load_settings().all_classes().values()
        if any(c.verification is not None for c in classes):
            import docfence.engines.verify_code  # noqa: F401


def _warm_sign() -> None:
    """The sign zygote's warm-up: pyHanko's imports and first-call set-up with a throwaway key."""
    checkpoint("sign-imports")
    from docfence import faults  # noqa: F401
    from docfence.engines import issue  # noqa: F401  (the sign task's entry point: ~110 ms a task else)
    from docfence.engines.signing import warm_up
    from docfence.samples.pdfs import many_pages
    from docfence.sandbox import work  # noqa: F401

    checkpoint("sign-warm-up")
    with contextlib.suppress(Exception):  # only a cache: a broken signer fails in its own task
        warm_up(many_pages(1))
    checkpoint("sign-freeze")
    _freeze()


def _import_reports() -> None:
    import docfence.sandbox.report_job  # noqa: F401  (weasyprint: the slowest import by far)


def _freeze() -> None:
    prepare()  # what every confinement repeats, done once before the forks
    gc.collect()
    gc.freeze()  # the warm heap is shared copy-on-write; the children's collections skip it
    with contextlib.suppress(OSError, ValueError):  # only an optimisation: a fork works either way
        collapse_anonymous_memory()  # each fork copies ~40 page-table entries for the heap, not ~19,000


WARM_LATER: tuple[Callable[[], None], ...] = (
    lambda: _warm_marks(default_only=False), _import_issue_stages, lambda: _sample(Mode.RASTER),
    _import_reports)


def warm_later(profile: str) -> tuple[Callable[[], None], ...]:
    """The idle-time warm-up steps of a zygote of `profile` (supervisor.PROFILES)."""
    if profile == "watermark":
        return tuple(step for step in WARM_LATER if step is not _import_reports)
    return WARM_LATER
IDLE_BEFORE_WARMING_S = 0.5  # a steady stream of tasks is never held up by warm-up steps
# A command-line zygote warms the default class's marks (~70 ms) once nothing has come for a moment
# after "ready", not before it: a run of one file, whose parent sends its request on "ready", forks at
# once and the step runs on the core the parent leaves idle; in a batch, later render processes
# inherit it; a parent still starting up finds the step done, as before.
COMMAND_LINE_LATER: tuple[Callable[[], None], ...] = (lambda: _warm_marks(default_only=True),)
COMMAND_LINE_IDLE_S = 0.05
COMMAND_LINE_TEXT = ("ascii", "any")  # what the --command-line zygote's marks may hold (main)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="docfence.sandbox.zygote")
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--profile", choices=("all", "watermark", "report", "sign"), default="all")
    parser.add_argument("--command-line", choices=COMMAND_LINE_TEXT, default=None,
                        help="started by one run of the docfence command: of the idle-time warm-up only "
                             "the default class's marks, after the first fork (the rest would take a "
                             "core from that run's own work); with 'ascii' (no mark can hold "
                             "another character: cli.mark_text) only the first font is parsed before "
                             "the first fork")
    args = parser.parse_args(argv)
    protocol.die_with_parent(args.parent)
    protocol.set_process_name(protocol.ZYGOTE_NAME)
    inherit.become_subreaper()
    inherit.prepare()  # what every render process's process limit repeats, resolved once
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it ends us
    signal.signal(signal.SIGTERM, _on_term)  # see _Term
    install_test_hook()
    mark("start")
    remove_orphans(RENDER_TMP_PREFIX, _TMP_BASE)  # render processes killed with an earlier zygote
    try:
        return _warm_and_serve(args, socket.socket(fileno=args.fd))
    except _Stop:  # stopped while warming, before anything was forked
        mark("stopped-warming")
        return 0
    finally:  # ending already: a later SIGTERM (the parent's stop) must not kill the interpreter's exit
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # (at exit Python resets a handler, not SIG_IGN)


def _warm_and_serve(args: argparse.Namespace, control: socket.socket) -> int:
    if args.profile == "sign":  # only our own validated outputs: no engines or fonts to warm
        _warm_sign()
        Zygote(control).serve(())
        return 0
    warm(every_font=args.command_line != "ascii", marks=not args.command_line, arrays=not args.command_line)
    if args.profile == "report":
        checkpoint("reports")
        _import_reports()
        checkpoint("reports-freeze")
        _freeze()
    if args.command_line:  # the default class's marks only after the first fork: see COMMAND_LINE_LATER
        Zygote(control).serve(COMMAND_LINE_LATER, idle_s=COMMAND_LINE_IDLE_S)
    else:
        Zygote(control).serve(warm_later(args.profile), idle_s=IDLE_BEFORE_WARMING_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
