"""Secrets never reach a zygote: after a sign task and a watermark task with a PDF password, the
watermark zygote's writable memory (what every later untrusted render process inherits) holds neither
the password nor the signing key, and the sign zygote not the password. Real processes, real
/proc/PID/mem reads (the tests run as root); a positive control shows the scan finds a secret that is
there (in the render process that was handed it)."""

from __future__ import annotations

import io
import re
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

import pikepdf
import pytest

from docfence.core.policy import JobPolicy, Limits, SigningSpec
from docfence.engines.signing import SigningKey
from docfence.samples import pdfs
from docfence.sandbox import Outcome, Sandbox, Task
from docfence.testing.procs import wait_for
from docfence.testing.proctree import environ as zygote_environ
from docfence.testing.proctree import render_processes
from docfence.testing.signing_ca import make_test_ca

HANG_GUARD_S = 120  # a hang guard only: the machine is shared
LONG = JobPolicy(limits=Limits(render_base_s=600.0, render_timeout_s=600.0))
PASSWORD = "Zyg0te-leak-" + secrets.token_hex(12)  # ASCII: CPython keeps it as these bytes


@pytest.fixture(scope="module")
def key() -> SigningKey:
    made = make_test_ca()
    return SigningKey.from_pkcs12(made.pkcs12, made.password)


def _encrypted(tmp_path: Path) -> Path:
    out = io.BytesIO()
    with pikepdf.open(io.BytesIO(pdfs.many_pages(1))) as pdf:
        pdf.save(out, encryption=pikepdf.Encryption(owner="o-" + PASSWORD, user=PASSWORD, R=6))
    path = tmp_path / "locked.pdf"
    path.write_bytes(out.getvalue())
    return path


def _needles(key: SigningKey | None = None) -> dict[str, bytes]:
    """What must not be found: the password, and slices of the key's DER and of its base64 (a slice
    finds a partial copy too)."""
    found = {"password": PASSWORD.encode()}
    if key is not None:
        b64 = key.to_request()["key"].encode()
        mid = len(key.key_der) // 2
        found |= {"key_der": key.key_der[mid:mid + 48], "key_b64": b64[len(b64) // 2:][:64]}
    return found


_MAP = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+)")


def _writable_memory(pid: int) -> Iterator[bytes]:
    """Each writable mapping of `pid` (heap, stacks, anonymous and data segments)."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            match = _MAP.match(line)
            if match is None or "w" not in match.group(3) or "[vvar" in line:
                continue
            start, end = int(match.group(1), 16), int(match.group(2), 16)
            try:
                mem.seek(start)
                yield mem.read(end - start)
            except (OSError, ValueError, OverflowError):
                continue


def _found(pid: int, needles: dict[str, bytes]) -> dict[str, int]:
    counts = dict.fromkeys(needles, 0)
    for region in _writable_memory(pid):
        for name, needle in needles.items():
            counts[name] += region.count(needle)
    return {name: n for name, n in counts.items() if n}


def test_no_secret_in_either_zygote_after_a_sign_and_a_password_task(key: SigningKey, tmp_path: Path) -> None:
    with Sandbox("watermark") as marks, Sandbox("sign") as signer:
        locked = marks.run(Task("watermark", _encrypted(tmp_path), tmp_path / "marked.pdf", LONG,
                                password=PASSWORD))
        assert locked.ok, locked  # the render process did get the password
        plain = tmp_path / "plain.pdf"
        plain.write_bytes(pdfs.many_pages(1))
        signed = signer.run(Task("sign", plain, tmp_path / "signed.pdf",
                                 JobPolicy(signing=SigningSpec(), limits=LONG.limits),
                                 signing=key.to_request()))
        assert signed.ok, signed  # and the signing process the key
        assert marks.zygote_pid is not None and signer.zygote_pid is not None
        assert _found(marks.zygote_pid, _needles(key)) == {}
        assert _found(signer.zygote_pid, _needles(key)) == {}
    assert not list(tmp_path.glob("*.secret*"))  # secrets travel in a pipe, never in a file


def test_a_task_prints_no_secret(key: SigningKey, tmp_path: Path) -> None:
    locked = Task("watermark", tmp_path / "i.pdf", tmp_path / "o.pdf", LONG, password=PASSWORD)
    sign = Task("sign", tmp_path / "i.pdf", tmp_path / "o.pdf", LONG, signing=key.to_request())
    assert PASSWORD not in repr(locked) and key.to_request()["key"] not in repr(sign)


def test_a_sign_task_never_runs_in_a_sandbox_that_forks_untrusted_work(key: SigningKey,
                                                                      tmp_path: Path) -> None:
    plain = tmp_path / "plain.pdf"
    plain.write_bytes(pdfs.many_pages(1))
    sign = Task("sign", plain, tmp_path / "s.pdf", JobPolicy(signing=SigningSpec()), signing=key.to_request())
    mark = Task("watermark", plain, tmp_path / "m.pdf", LONG)
    for profile in ("all", "watermark", "report"):
        with pytest.raises(ValueError, match="sign"):
            Sandbox(profile).run(sign)
    with pytest.raises(ValueError, match="sign"):
        Sandbox("sign").run(mark)


def test_the_render_process_holds_the_password_it_was_handed(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The positive control: the same scan finds the password in the render process (stalled at the
    `render` fault point, after it took its secrets), so an empty scan of a zygote means something."""
    monkeypatch.setenv("DOCFENCE_FAULTS", "render=sleep:3600")
    monkeypatch.setenv("DOCFENCE_FAULTS_DIR", str(tmp_path))
    stop = threading.Event()
    with Sandbox("watermark") as stalled:
        stalled.start()
        result: list[Outcome] = []
        task = Task("watermark", _encrypted(tmp_path), tmp_path / "o.pdf", LONG, password=PASSWORD)
        thread = threading.Thread(target=lambda: result.append(stalled.run(task, cancel=stop.is_set)))
        thread.start()
        try:
            child = wait_for(lambda: render_processes(stalled.zygote_pid or 0), HANG_GUARD_S,
                             "a render process")[0]
            wait_for(lambda: _found(child, _needles()), HANG_GUARD_S, "the password in the render process")
            assert stalled.zygote_pid is not None and _found(stalled.zygote_pid, _needles()) == {}
        finally:
            stop.set()
            thread.join(HANG_GUARD_S)
    assert result and result[0].canceled


def test_the_zygote_inherits_no_credential_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's environment may hold the password-sealing key, the PKCS#12 password, database and
    storage credentials: none reaches the zygote's environment or memory; ordinary settings still do."""
    planted = {name: "env-" + secrets.token_hex(16) for name in (
        "DOCFENCE_PASSWORD_KEY", "DOCFENCE_SIGNING_PKCS12_PASSWORD", "DOCFENCE_SIGNING_SECRET",
        "DOCFENCE_DATABASE_URL", "AWS_SECRET_ACCESS_KEY")}
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DOCFENCE_DEFAULT_CLASS", "default")
    with Sandbox("sign") as box:
        box.start()
        assert box.zygote_pid is not None
        environ = zygote_environ(box.zygote_pid)
        assert environ.get(b"DOCFENCE_DEFAULT_CLASS") == b"default"
        assert not {name.encode() for name in planted} & set(environ)
        assert _found(box.zygote_pid, {n: v.encode() for n, v in planted.items()}) == {}
