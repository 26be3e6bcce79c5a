"""Outside tools' verdicts on a PDF docfence produced: qpdf (--check, --json), poppler (pdfinfo and its
-meta, pdftotext, pdfdetach, pdffonts, pdfsig, pdftoppm) and MuPDF (mutool draw), and zbarimg on a
poppler render. None of them is docfence's own code; `judge` turns an expectation into the list
of what the tools found wrong (empty: the file holds)."""

from __future__ import annotations

import functools
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Expect", "ToolError", "assert_holds", "embedded_files", "judge", "pdfinfo", "pdfsig", "pdftotext",
           "qpdf_check", "qpdf_objects", "qr_codes", "render_gray", "xmp"]

TIMEOUT_S = 120  # a hang guard only: each tool answers in well under a second on these files
# What the tools say about themselves, not about the file: Debian's MuPDF is built without lcms2.
ABOUT_THE_TOOL = ("warning: ICC support is not available",)


class ToolError(AssertionError):
    """An outside tool refused the file: its name, arguments and what it printed."""


def _run(args: list[str], *, ok_codes: tuple[int, ...] = (0,), quiet: bool = True) -> str:
    """The tool's output; ToolError when it exits otherwise, or (`quiet`) says anything on stderr:
    poppler and MuPDF report a damaged file there and still exit 0."""
    done = subprocess.run(args, capture_output=True, timeout=TIMEOUT_S, check=False)
    out = done.stdout.decode("utf-8", "replace")
    err = "\n".join(line for line in done.stderr.decode("utf-8", "replace").splitlines()
                    if line.strip() and line.strip() not in ABOUT_THE_TOOL)
    if done.returncode not in ok_codes or (quiet and err):
        shown = " ".join([*args[:-1], Path(args[-1]).name])
        raise ToolError(f"{shown}: exit {done.returncode}: {(err or out).strip()[-800:]}")
    return out


def _poppler_pw(password: str | None) -> list[str]:
    return ["-upw", password] if password else []


def qpdf_check(path: Path, password: str | None = None) -> str:
    """`qpdf --check`: exit 0 and no warning (qpdf exits 3 on warnings, 2 on errors)."""
    return _run(["qpdf", f"--password={password or ''}", "--check", str(path)])


def qpdf_objects(path: Path, password: str | None = None) -> dict[str, Any]:
    """Every object as qpdf reads it (`qpdf --json`, decoded): {"obj:N 0 R": {...}, "trailer": {...}}.
    Read once per file version (several judgements look at the same objects)."""
    stat = path.stat()
    return _qpdf_objects(str(path), password, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _qpdf_objects(path: str, password: str | None, size: int, mtime_ns: int) -> dict[str, Any]:
    out = _run(["qpdf", f"--password={password or ''}", "--json", "--json-key=qpdf", path])
    objects: dict[str, Any] = json.loads(out)["qpdf"][1]
    return objects


def catalog(objects: dict[str, Any]) -> dict[str, Any]:
    root = objects["trailer"]["value"]["/Root"]
    value: dict[str, Any] = objects[f"obj:{root}"]["value"]
    return value


def has_key(objects: dict[str, Any], key: str) -> bool:
    """Whether any object (dictionary or stream dictionary, nested values included) holds `key`."""
    return f'"{key}"' in json.dumps(objects)


def pdfinfo(path: Path, password: str | None = None, *flags: str) -> dict[str, str]:
    """pdfinfo's `Key: value` lines."""
    out = _run(["pdfinfo", *_poppler_pw(password), *flags, str(path)])
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines()) if v}


def xmp(path: Path, password: str | None = None) -> str:
    """The document's XMP metadata as `pdfinfo -meta` prints it (empty: none)."""
    out = _run(["pdfinfo", *_poppler_pw(password), "-meta", str(path)])
    return out[out.find("<?xpacket"):] if "<?xpacket" in out or "<x:xmpmeta" in out else ""


def link_urls(path: Path, password: str | None = None) -> list[str]:
    """Every /URI an action holds, as qpdf reads them. (Not `pdfinfo -url`: poppler 22.12 crashes on a
    link annotation without an action, which is valid PDF and what link_uris = "strip" leaves.)"""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            uri = value.get("/URI")
            if isinstance(uri, str):
                found.append(uri.removeprefix("u:"))
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(qpdf_objects(path, password))
    return sorted(found)


def pdftotext(path: Path, password: str | None = None) -> str:
    return _run(["pdftotext", *_poppler_pw(password), "-layout", str(path), "-"])


def embedded_files(path: Path, password: str | None = None) -> int:
    out = _run(["pdfdetach", *_poppler_pw(password), "-list", str(path)])
    match = re.match(r"\s*(\d+) embedded files", out)
    return int(match.group(1)) if match else 0


def unembedded_fonts(path: Path, password: str | None = None) -> list[str]:
    """Names of the fonts pdffonts lists as not embedded."""
    out = _run(["pdffonts", *_poppler_pw(password), str(path)])
    rows = out.splitlines()[2:]
    return [row.split()[0] for row in rows if len(row.split()) >= 5 and row.split()[-5] == "no"]


def pdfsig(path: Path, password: str | None = None) -> str:
    """pdfsig's report (exit 2: the file has no signature, the report says so)."""
    return _run(["pdfsig", *_poppler_pw(password), str(path)], ok_codes=(0, 2), quiet=False)


def render_gray(path: Path, workdir: Path, page: int, *, dpi: int = 36, password: str | None = None) -> bytes:
    """MuPDF's rendering of one page (`mutool draw`, grey PGM): a second renderer beside poppler."""
    out = workdir / f"{path.stem}-mu{page}.pgm"
    _run(["mutool", "draw", "-q", *(["-p", password] if password else []), "-r", str(dpi), "-c", "gray",
          "-o", str(out), str(path), str(page)])
    return out.read_bytes()


def qr_codes(path: Path, workdir: Path, page: int, password: str | None = None) -> list[str]:
    """What zbarimg decodes from poppler's 150 DPI render of `page`."""
    prefix = workdir / f"{path.stem}-qr{page}"
    _run(["pdftoppm", *_poppler_pw(password), "-r", "150", "-gray", "-png", "-singlefile", "-f", str(page),
          "-l", str(page), str(path), str(prefix)])
    # QR only: zbar's other decoders print assertion warnings over page text; no D-Bus announcement
    # of what was found; exit 4: no symbol found
    out = _run(["zbarimg", "-q", "--raw", "--nodbus", "-Sdisable", "-Sqrcode.enable", f"{prefix}.png"],
               ok_codes=(0, 4))
    return out.split()


@dataclass(frozen=True)
class Expect:
    """What a produced file must show the outside tools. None: not judged."""

    pages: int | None = None
    password: str | None = None  # the user password a reader needs (the output kept its encryption)
    text: tuple[str, ...] = ()  # strings pdftotext must find (the input's text, kept in vector mode)
    no_text: tuple[str, ...] = ()  # strings it must not find (a raster page carries no text)
    differs_from: Path | None = None  # an input whose page 1 must render differently (the marks show)
    differs_password: str | None = None
    code_url: str | None = None  # the URL zbarimg must read on code_pages, and only there ("": no code)
    code_pages: tuple[int, ...] = ()
    signed: bool | None = None  # pdfsig: a valid signature over the whole file (False: no signature)
    author: str | None = None  # pdfinfo's Author ("": none)
    embedded: int | None = None  # pdfdetach's count of embedded files
    javascript: bool | None = None  # a /JS key anywhere (qpdf --json)
    urls: tuple[str, ...] | None = None  # every /URI of an action (qpdf --json), sorted
    variant: str | None = None  # "pdf/a-3b" or "pdf/ua-1": its identification and visible properties
    extra: dict[str, Any] = field(default_factory=dict)


def judge(path: Path, expect: Expect, workdir: Path) -> list[str]:
    """Every problem the outside tools find with `path` against `expect` (empty: none)."""
    workdir.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    for check in (_structure, _render, _text, _sanitised, _issued, _variant):
        try:
            problems.extend(check(path, expect, workdir))
        except ToolError as exc:
            problems.append(str(exc))
    return problems


def assert_holds(path: Path, expect: Expect, workdir: Path) -> None:
    """AssertionError listing every problem `judge` finds, one per line."""
    problems = judge(path, expect, workdir)
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def _structure(path: Path, expect: Expect, workdir: Path) -> list[str]:
    qpdf_check(path, expect.password)
    info = pdfinfo(path, expect.password)
    problems = []
    if expect.pages is not None and info.get("Pages") != str(expect.pages):
        problems.append(f"pdfinfo: Pages {info.get('Pages')}, expected {expect.pages}")
    encrypted = info.get("Encrypted", "no").startswith("yes")
    if encrypted != (expect.password is not None):
        problems.append(f"pdfinfo: Encrypted {info.get('Encrypted')}, expected "
                        f"{'yes' if expect.password else 'no'}")
    return problems


def _render(path: Path, expect: Expect, workdir: Path) -> list[str]:
    pages = expect.pages or int(pdfinfo(path, expect.password).get("Pages", "1"))
    renders = [render_gray(path, workdir, page, password=expect.password) for page in range(1, pages + 1)]
    if expect.differs_from is not None and \
            renders[0] == render_gray(expect.differs_from, workdir, 1, password=expect.differs_password):
        return ["mutool draw: page 1 renders exactly like the input's (no visible mark)"]
    return []


def _text(path: Path, expect: Expect, workdir: Path) -> list[str]:
    text = " ".join(pdftotext(path, expect.password).split())
    return ([f"pdftotext: {s!r} missing" for s in expect.text if s not in text]
            + [f"pdftotext: {s!r} found" for s in expect.no_text if s in text])


def _sanitised(path: Path, expect: Expect, workdir: Path) -> list[str]:
    problems = []
    if expect.author is not None:
        author = pdfinfo(path, expect.password).get("Author", "")
        if author != expect.author:
            problems.append(f"pdfinfo: Author {author!r}, expected {expect.author!r}")
    if expect.embedded is not None and (n := embedded_files(path, expect.password)) != expect.embedded:
        problems.append(f"pdfdetach: {n} embedded file(s), expected {expect.embedded}")
    if expect.javascript is not None:
        found = has_key(qpdf_objects(path, expect.password), "/JS")
        if found != expect.javascript:
            problems.append(f"qpdf --json: /JS {'present' if found else 'absent'}, expected "
                            f"{'present' if expect.javascript else 'absent'}")
    if expect.urls is not None and (urls := link_urls(path, expect.password)) != list(expect.urls):
        problems.append(f"qpdf --json: link URIs {urls}, expected {list(expect.urls)}")
    return problems


def _issued(path: Path, expect: Expect, workdir: Path) -> list[str]:
    problems = []
    if expect.code_url is not None:
        pages = expect.pages or int(pdfinfo(path, expect.password).get("Pages", "1"))
        for page in range(1, pages + 1):
            read = qr_codes(path, workdir, page, expect.password)
            wanted = [expect.code_url] if expect.code_url and page in expect.code_pages else []
            if read != wanted:
                problems.append(f"zbarimg page {page}: {read}, expected {wanted}")
    if expect.signed is not None:
        report = pdfsig(path, expect.password)
        valid = "Signature is Valid" in report and "Total document signed" in report
        none = "does not contain any signatures" in report
        if (expect.signed and not valid) or (not expect.signed and not none):
            problems.append(f"pdfsig: {' '.join(report.split())[:400]}")
    return problems


def _variant(path: Path, expect: Expect, workdir: Path) -> list[str]:
    if expect.variant is None:
        return []
    meta = xmp(path, expect.password)
    objects = qpdf_objects(path, expect.password)
    root = catalog(objects)
    problems = []

    def claims(prefix: str, name: str, value: str) -> bool:
        return bool(re.search(rf'{prefix}:{name}\s*=\s*"{value}"|<{prefix}:{name}>\s*{value}\s*<', meta))

    if expect.variant == "pdf/a-3b":
        if not (claims("pdfaid", "part", "3") and claims("pdfaid", "conformance", "B")):
            problems.append(f"pdfinfo -meta: no pdfaid part 3 conformance B in {meta[:200]!r}")
        if "/OutputIntents" not in root:
            problems.append("qpdf --json: the catalog has no /OutputIntents")
    if expect.variant == "pdf/ua-1":
        if not claims("pdfuaid", "part", "1"):
            problems.append(f"pdfinfo -meta: no pdfuaid part 1 in {meta[:200]!r}")
        if "<dc:title" not in meta:
            problems.append("pdfinfo -meta: no dc:title")
        if pdfinfo(path, expect.password).get("Tagged") != "yes":
            problems.append("pdfinfo: Tagged is not yes")
        for key in ("/Lang", "/StructTreeRoot", "/MarkInfo"):
            if key not in root:
                problems.append(f"qpdf --json: the catalog has no {key}")
    if missing := unembedded_fonts(path, expect.password):
        problems.append(f"pdffonts: not embedded: {missing}")
    return problems
