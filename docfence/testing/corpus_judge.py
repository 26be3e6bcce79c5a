"""The outside readers' judgement of `docfence watermark` answers on a shared corpus: which readers (qpdf,
pdfinfo, mutool) read a file, one CLI run per file measured (wall seconds, peak resident MB of its process
tree), and the breadth rule of issue 29 part 5 (normal: validated; odd: validated or a policy's coded
refusal; bad: a coded refusal). Used by bench/corpus_sweep.py and tests/engines/test_corpora_breadth.py."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docfence.core.clock import monotonic

__all__ = ["BAD_REFUSALS", "DOCFENCE", "LIMIT_MB", "LIMIT_S", "NORMAL_REFUSALS", "ODD_REFUSALS",
           "POLICY_REFUSALS", "Answer",
           "assess", "breaks_rule", "categories", "corpus_files", "drawable_pages", "judge", "manifest",
           "pages", "readers", "run_one", "sample", "verdict_of_readers"]

DOCFENCE = Path(sys.executable).with_name("docfence")
TIMEOUT_S = 120  # a hang guard for one tool or one CLI run, far above the 20 s the rule allows
LIMIT_S = 20.0  # issue 29 part 5: every answer within 20 s ...
LIMIT_MB = 300.0  # ... and 300 MB
NOT_FILES = ("README.md", "manifest.tsv")
# A `normal` file may be refused only by the class's configured limits (its size, pages, objects, or
# pixels at its DPI against its render memory): never by a check failing docfence's own output.
NORMAL_REFUSALS = frozenset({"over_limits"})
# The refusals a class chose by its policy (owner-password policy, limits, active content), or the
# caller's (no password given for a file that needs one), and those of docfence's repair policy: it
# repairs only what every reader recovers, so a file some reader rejects may end in its damage's code.
# An `odd` or a `bad` file may end in one of them; never in docfence failing its own output
# (validation_failed) or itself (engine_error, render_crashed, a crash, a timeout).
POLICY_REFUSALS = NORMAL_REFUSALS | frozenset({
    "permissions_forbid_modification", "active_content_refused", "render_resource_exceeded",
    "password_required", "invalid_password"})
BAD_REFUSALS = ODD_REFUSALS = POLICY_REFUSALS | frozenset({
    "not_a_pdf", "malformed_pdf", "no_pages", "page_tree_invalid", "corrupt_content", "form_tree_invalid",
    "resource_cycle", "unsupported_feature"})


def _ok(args: list[str], accept: tuple[int, ...] = (0,)) -> bool:
    try:
        done = subprocess.run(args, capture_output=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode in accept


def readers(path: Path) -> list[bool]:
    """qpdf, pdfinfo and mutool on one file: does each read it?"""
    return [
        _ok(["qpdf", "--check", str(path)], (0, 3)),
        _ok(["pdfinfo", str(path)]),
        _ok(["mutool", "draw", "-q", "-r", "20", "-F", "ppm", "-o", "/dev/null", str(path)]),
    ]


def pages(path: Path) -> int | None:
    done = subprocess.run(["pdfinfo", str(path)], capture_output=True, timeout=TIMEOUT_S, check=False)
    for line in done.stdout.decode(errors="replace").splitlines():
        if line.startswith("Pages:"):
            return int(line.split()[1])
    return None


def drawable_pages(path: Path, count: int) -> int:
    """How many of the `count` pages a reader announces mutool can find and draw (a /Count that
    overstates the page tree, or a kid that is not a page, is announced but never drawn)."""
    drawn = 0
    for number in range(1, min(count, 60) + 1):
        done = subprocess.run(["mutool", "draw", "-q", "-r", "10", "-F", "ppm", "-o", "/dev/null", str(path),
                               str(number)], capture_output=True, timeout=TIMEOUT_S, check=False)
        text = done.stderr.decode(errors="replace")
        drawn += "cannot find page" not in text and "non-page object" not in text
    return drawn


def _rows(folder: Path) -> list[dict[str, str]]:
    table = folder / "manifest.tsv"
    if not table.is_file():
        return []
    with table.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def manifest(folder: Path) -> dict[str, str]:
    """name -> category from the three readers, when the folder's manifest carries one from them."""
    rows = _rows(folder)
    if not rows or "note" not in rows[0]:  # a hand-written category, not the readers'
        return {}
    return {row["name"]: row["category"] for row in rows}


def categories(folder: Path) -> dict[str, str]:
    """name -> the manifest's category (normal | odd | bad), the readers' or hand-written."""
    return {row.get("name") or row["file"]: row["category"] for row in _rows(folder)}


def corpus_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name not in NOT_FILES)


def sample(folder: Path, per_category: dict[str, int]) -> list[Path]:
    """A deterministic, stratified sample: per category the first N names by a fixed hash (a category
    absent from `per_category` is taken whole)."""
    kinds = categories(folder)
    chosen: list[Path] = []
    for kind in sorted(set(kinds.values())):
        names = sorted((n for n, k in kinds.items() if k == kind),
                       key=lambda n: hashlib.sha256(n.encode()).hexdigest())
        chosen += [folder / n for n in names[: per_category.get(kind, len(names))]]
    return sorted(chosen)


@dataclass
class Answer:
    """One CLI run on one file: its JSON entry, wall seconds of the whole run (start-up included) and
    the peak resident MB of the largest process of its tree (wait4's ru_maxrss covers the waited-for
    descendants: the sandbox's render processes)."""

    entry: dict[str, Any]
    seconds: float
    peak_mb: float
    stderr: str = field(default="", repr=False)


def run_one(path: Path, mode: str, out: Path, extra: tuple[str, ...] = ()) -> Answer:
    """`docfence watermark --json` on one file in a process group of its own, killed at TIMEOUT_S."""
    args = [str(DOCFENCE), "watermark", "--out", str(out), "--mode", mode, "--json", "--jobs", "1", *extra,
            str(path)]
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr, \
            tempfile.NamedTemporaryFile(prefix="peak-") as peak:
        started = monotonic()
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, peak.name, *args], stdout=stdout,
                                stderr=stderr, start_new_session=True)
        timer = threading.Timer(TIMEOUT_S, os.killpg, (proc.pid, signal.SIGKILL))
        timer.start()
        try:
            proc.wait()
        finally:
            timer.cancel()
        seconds = monotonic() - started
        stdout.seek(0)
        stderr.seek(0)
        text, err = stdout.read().decode(errors="replace"), stderr.read().decode(errors="replace")
        peak_kb = int(Path(peak.name).read_text() or 0)
    try:
        entry: dict[str, Any] = json.loads(text)["files"][0]
    except (ValueError, KeyError, IndexError):
        code = "timeout" if seconds >= TIMEOUT_S else "cli_crashed"
        entry = {"input": str(path), "ok": False, "code": code, "message": f"exit {proc.returncode}"}
    return Answer(entry, round(seconds, 3), round(peak_kb / 1024, 1), err[-2000:])


#: Runs the command as a child of a small process and writes the peak RSS (kB) of its tree to argv[1].
#: Linux carries a process's peak RSS across exec, and a child forked from a large test process starts
#: with that process's pages: measured directly, the command would report the test runner's memory.
_LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def judge(entry: dict[str, Any], category: str, read: list[bool]) -> dict[str, Any]:
    """One answer judged: a refusal of a file all three readers read is `wrong`, other refusals are
    `refused`; an output is `wrong` if a reader of the input cannot read it or its page count differs
    (from the pages a reader can draw), else `valid`."""
    source = Path(entry["input"])
    row: dict[str, Any] = {"name": source.name, "category": category, "readers": read,
                           "seconds": entry.get("seconds")}
    if not entry["ok"]:
        checks = [c["name"] for c in entry.get("checks", [])]
        row.update(code=entry["code"], checks=checks, message=entry.get("message"))
        row["outcome"] = "wrong" if all(read) else "refused"
        return row
    output = Path(entry["output"])
    out_read, here = readers(output), readers(source)  # judged against what reads the input on this machine
    row["code"] = "ok"
    same_pages = True
    if here[1] and (announced := pages(source)) != (made := pages(output)):
        same_pages = made == drawable_pages(source, announced or 0)
    lost = any(before and not after for before, after in zip(here, out_read, strict=True))
    row["outcome"] = "wrong" if lost or not same_pages else "valid"
    if row["outcome"] == "wrong":
        row["output_readers"], row["same_pages"] = out_read, same_pages
    return row


def verdict_of_readers(path: Path, readers_category: str) -> tuple[list[bool], str]:
    """What the three readers make of an input: the manifest's verdict when it is the readers' (`normal`:
    all read it, `bad`: none), else measured here; and the category that follows from it."""
    read = {"normal": [True] * 3, "bad": [False] * 3}.get(readers_category) or readers(path)
    return read, readers_category or {3: "normal", 0: "bad"}.get(sum(read), "odd")


def assess(path: Path, mode: str, category: str, readers_category: str) -> dict[str, Any]:
    """One file through one CLI run (its output in a folder of its own, removed after), judged: the
    judge's row plus `peak_mb`, `wall_s` and `breaks` (why it breaks the breadth rule, or None)."""
    with tempfile.TemporaryDirectory(prefix="corpus-judge-") as out:
        answer = run_one(path, mode, Path(out))
        read, _ = verdict_of_readers(path, readers_category)
        row = judge(answer.entry, category, read)
    row.update(wall_s=answer.seconds, peak_mb=answer.peak_mb, breaks=breaks_rule(category, row, answer))
    if row["code"] in ("cli_crashed", "timeout"):
        row["stderr"] = answer.stderr[-600:]
    return row


def breaks_rule(category: str, row: dict[str, Any], answer: Answer) -> str | None:
    """Why an answer breaks the breadth rule (None: it keeps it). Its time is the answer's as the CLI
    measured it (render and validation; the CLI's own start-up is in `wall_s`), its memory the tree's."""
    code, outcome = row["code"], row["outcome"]
    seconds = answer.entry.get("seconds") or answer.seconds
    if seconds > LIMIT_S or answer.peak_mb > LIMIT_MB:
        return f"over budget: {seconds} s, {answer.peak_mb} MB (limits {LIMIT_S} s, {LIMIT_MB} MB)"
    if code == "ok":
        if outcome != "valid" or category == "bad":
            found = f"readers {row.get('output_readers')}, same pages {row.get('same_pages')}"
            return f"{category} file: output {outcome} ({found})"
        return None
    allowed = {"normal": NORMAL_REFUSALS, "odd": ODD_REFUSALS, "bad": BAD_REFUSALS}.get(category, frozenset())
    if code in allowed:
        return None
    return f"{category} file refused: {code} {row.get('checks') or ''} {row.get('message') or ''}".strip()
