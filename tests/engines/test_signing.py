"""Signed output: a throwaway CA made at test time issues the organisation's certificate; the signature
is checked by pyHanko's validation (the validator's) and by poppler's pdfsig (independent), visible and
invisible. Planted defects: bytes appended after the signature (it no longer covers the last revision),
bytes changed inside the signed range (a cross-reference entry the proof never reads among them), a
byte range whose gap is not the /Contents string, validated bytes that are not the signed file's prefix
and a certificate of another CA must fail; encrypted outputs are refused."""

from __future__ import annotations

import io
import re
import subprocess
from pathlib import Path

import pikepdf
import pytest

from docfence import engines
from docfence.core.errors import ConfigError, SigningRefused, ValidationFailed
from docfence.core.policy import JobPolicy, SigningSpec, VerificationSpec
from docfence.engines import signing
from docfence.engines.issue import issue, sign_validated
from docfence.samples import pdfs
from docfence.testing.signing_ca import ThrowawayCa, make_test_ca, write_test_ca

URL = "https://verify.example.org/v1/verify/01JABCDEFGHJKMNPQRSTVWXYZ0?c=ABCDEFGHJKMNPQRS"


@pytest.fixture(scope="module")
def ca() -> ThrowawayCa:
    return make_test_ca()


@pytest.fixture(scope="module")
def key(ca: ThrowawayCa) -> signing.SigningKey:
    opened = signing.SigningKey.from_pkcs12(ca.pkcs12, ca.password)
    return signing.SigningKey.from_request(opened.to_request())  # as a render process receives it


@pytest.fixture(scope="module")
def marked() -> bytes:
    return engines.watermark_document(pdfs.many_pages(3), JobPolicy()).output


def failed(checks: list[dict[str, object]]) -> set[str]:
    return {str(c["name"]) for c in checks if not c["ok"]}


def pdfsig(data: bytes, tmp_path: Path) -> str:
    path = tmp_path / "signed.pdf"
    path.write_bytes(data)
    return subprocess.run(["pdfsig", str(path)], capture_output=True, text=True, timeout=60).stdout


@pytest.mark.parametrize("visible", [False, True])
def test_signed_output_validates_with_pyhanko_and_pdfsig(marked: bytes, key: signing.SigningKey,
                                                         visible: bool, tmp_path: Path) -> None:
    spec = SigningSpec(visible=visible)
    signed = signing.sign(marked, spec, key)
    assert signed.startswith(marked)  # one incremental update: the validated bytes are kept as they were
    checks = signing.prove(signed, spec, key)
    assert failed(checks) == set(), checks
    assert checks[0]["signer"] and "Example Health Documents" in str(checks[0]["signer"])
    report = pdfsig(signed, tmp_path)
    assert "Signature is Valid" in report and "Total document signed" in report, report
    with pikepdf.open(io.BytesIO(signed)) as pdf:  # the widget is on the first page (see SigningSpec.page)
        widget = next(a for a in pdf.pages[0].obj.get("/Annots", []) if a.get("/FT") == "/Sig")
        width = float(widget.Rect[2]) - float(widget.Rect[0])
    assert (width > 0) is visible


def test_the_parents_signed_attributes_are_pyhankos_own(key: signing.SigningKey) -> None:
    """The encoding the parent makes once, with a document's digest filled in, is byte for byte what
    pyHanko builds for that digest (a pyHanko upgrade that changes its attributes fails here)."""
    import asyncio
    import hashlib

    from pyhanko.sign.signers.pdf_cms import PdfCMSSignedAttributes, Signer

    assert key.signed_attrs_der  # shipped to the render process with the key
    signer = key.signer()
    digest = hashlib.sha256(b"a document").digest()
    settings = PdfCMSSignedAttributes()
    loop = asyncio.new_event_loop()
    try:
        filled = loop.run_until_complete(signer.signed_attrs(digest, "sha256", settings, use_pades=True))
        built = loop.run_until_complete(
            Signer.signed_attrs(signer, digest, "sha256", settings, use_pades=True))
        other = loop.run_until_complete(signer.signed_attrs(digest, "sha256", settings, use_pades=False))
    finally:
        loop.close()
    assert filled.dump() == built.dump()
    assert other.dump() != filled.dump()  # another request is pyHanko's to build


def test_an_output_with_object_streams_signs_and_proves(key: signing.SigningKey, tmp_path: Path) -> None:
    """An output kept with object streams (an xref stream, read on demand like a classic table)."""
    buf = io.BytesIO()
    with pikepdf.open(io.BytesIO(engines.watermark_document(pdfs.many_pages(5), JobPolicy()).output)) as pdf:
        pdf.save(buf, object_stream_mode=pikepdf.ObjectStreamMode.generate)
    data, spec = buf.getvalue(), SigningSpec(visible=True)
    signed = signing.sign(data, spec, key)
    assert signed.startswith(data)
    assert failed(signing.prove(signed, spec, key, validated=data)) == set()
    assert "Total document signed" in pdfsig(signed, tmp_path)


def test_a_visible_signature_on_the_last_page(marked: bytes, key: signing.SigningKey) -> None:
    spec = SigningSpec(visible=True, page="last")
    signed = signing.sign(marked, spec, key)
    assert failed(signing.prove(signed, spec, key)) == set()
    with pikepdf.open(io.BytesIO(signed)) as pdf:
        assert any(a.get("/FT") == "/Sig" for a in pdf.pages[-1].obj.get("/Annots", []))
        assert not pdf.pages[0].obj.get("/Annots")


def test_code_then_signature_in_one_pipeline(key: signing.SigningKey, tmp_path: Path) -> None:
    policy = JobPolicy(verification=VerificationSpec(url=URL), signing=SigningSpec(visible=True))
    result = engines.watermark_document(pdfs.many_pages(2), policy)
    coded = issue(result.output, result.validation, policy)  # in the render process
    output, report = sign_validated(coded, policy, key)  # in a process of its own, after validation
    assert [c["name"] for c in result.validation["checks"]][-2:] == ["verification_code_structure",
                                                                     "verification_code_decodes"]
    assert [c["name"] for c in report["checks"]] == ["signature_valid", "signature_covers_file"]
    assert result.validation["ok"] is True and report["ok"] is True
    assert "Total document signed" in pdfsig(output, tmp_path)


# -- planted defects ---------------------------------------------------------------------------------
def test_a_failed_signature_proof_fails_with_its_report(marked: bytes, key: signing.SigningKey,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    policy = JobPolicy(signing=SigningSpec())
    monkeypatch.setattr(signing, "sign", lambda data, spec, key: _append_update(_real_sign(data, spec, key)))
    with pytest.raises(ValidationFailed) as caught:
        sign_validated(marked, policy, key)
    report = caught.value.report  # type: ignore[attr-defined]
    assert report["ok"] is False and failed(report["checks"]) == {"signature_covers_file"}


_real_sign = signing.sign


def test_an_update_after_the_signature_fails_coverage(marked: bytes, key: signing.SigningKey) -> None:
    spec = SigningSpec()
    appended = _append_update(signing.sign(marked, spec, key))
    assert failed(signing.prove(appended, spec, key)) >= {"signature_covers_file"}


def _append_update(signed: bytes) -> bytes:
    """pyHanko's incremental writer adds a revision that sets /Lang: the signature stays intact, but the
    file's last revision is no longer the signed one."""
    from pyhanko.pdf_utils.generic import NameObject, TextStringObject
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter

    writer = IncrementalPdfFileWriter(io.BytesIO(signed))
    writer.root[NameObject("/Lang")] = TextStringObject("en")
    writer.update_root()
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_changed_signed_bytes_fail_the_signature(marked: bytes, key: signing.SigningKey) -> None:
    spec = SigningSpec()
    signed = signing.sign(marked, spec, key)
    at = signed.index(b"/Type /Page") if b"/Type /Page" in signed else 200
    tampered = signed[:at] + (b"X" if signed[at:at + 1] != b"X" else b"Y") + signed[at + 1:]
    assert failed(signing.prove(tampered, spec, key)) >= {"signature_valid"}


def test_a_signature_by_another_ca_fails(marked: bytes, key: signing.SigningKey) -> None:
    """Signed with another organisation's certificate: intact and cryptographically valid, but its chain
    does not lead to the configured CA."""
    other = make_test_ca()
    stranger = signing.SigningKey.from_pkcs12(other.pkcs12, other.password)
    spec = SigningSpec()
    checks = signing.prove(signing.sign(marked, spec, stranger), spec, key)
    assert failed(checks) == {"signature_valid"}
    assert checks[0]["failures"] == ["the signer's chain does not lead to the configured CA"]


def test_a_byte_range_gap_that_is_not_the_contents_fails_coverage(marked: bytes,
                                                                  key: signing.SigningKey) -> None:
    """The byte range moved two bytes earlier: the lengths still add up to the file (pyHanko's coverage
    level says "entire file"), but the gap is no longer the /Contents string."""
    spec = SigningSpec()
    signed = signing.sign(marked, spec, key)
    found = re.search(rb"/ByteRange \[0 (\d+) (\d+) (\d+) *\]", signed)
    assert found is not None
    a, b, c = (int(n) for n in found.groups())
    moved = b"/ByteRange [0 %d %d %d]" % (a - 2, b - 2, c + 2)
    shifted = signed[:found.start()] + moved.ljust(found.end() - found.start()) + signed[found.end():]
    assert len(shifted) == len(signed)
    checks = signing.prove(shifted, spec, key)
    coverage = next(c for c in checks if c["name"] == "signature_covers_file")
    assert "the byte range's gap is not exactly the signature's /Contents string" in coverage["failures"]


def test_validated_bytes_that_are_not_the_prefix_fail_coverage(marked: bytes,
                                                              key: signing.SigningKey) -> None:
    spec = SigningSpec()
    signed = signing.sign(marked, spec, key)
    assert failed(signing.prove(signed, spec, key, validated=marked)) == set()
    changed = marked[:100] + (b"X" if marked[100:101] != b"X" else b"Y") + marked[101:]
    assert failed(signing.prove(signed, spec, key, validated=changed)) == {"signature_covers_file"}


def test_a_changed_cross_reference_entry_signing_never_reads_fails(key: signing.SigningKey) -> None:
    """The proof reads the base table's entries on demand, so it never reads the last object's entry:
    a change there is still a change inside the signed range."""
    marked = engines.watermark_document(pdfs.many_pages(20), JobPolicy()).output
    spec = SigningSpec()
    signed = signing.sign(marked, spec, key)
    table = marked.rindex(b"\nxref\n")
    last_entry = marked.index(b"trailer", table) - 20
    assert re.fullmatch(rb"\d{10} \d{5} n[ \r]?\n?", signed[last_entry:last_entry + 20])
    tampered = signed[:last_entry] + b"9" + signed[last_entry + 1:]
    assert failed(signing.prove(tampered, spec, key)) >= {"signature_valid"}


def test_the_control_passes(marked: bytes, key: signing.SigningKey) -> None:
    spec = SigningSpec()
    assert failed(signing.prove(signing.sign(marked, spec, key), spec, key)) == set()


def test_an_encrypted_output_is_refused(key: signing.SigningKey) -> None:
    buf = io.BytesIO()
    with pikepdf.open(io.BytesIO(pdfs.many_pages(1))) as pdf:
        pdf.save(buf, encryption=pikepdf.Encryption(owner="o-secret", user="u-secret", R=6))
    policy = JobPolicy(signing=SigningSpec(), owner_password_policy="keep")
    result = engines.watermark_document(buf.getvalue(), policy, password="u-secret")
    with pytest.raises(SigningRefused) as caught:
        sign_validated(result.output, policy, key)
    assert caught.value.code == "signing_refused"


def test_a_wrong_key_file_or_password_stops_at_start_up(ca: ThrowawayCa, tmp_path: Path) -> None:
    path, made = write_test_ca(tmp_path)
    assert signing.load_key(str(path), made.password).cert_der
    with pytest.raises(ConfigError, match=r"\[signing\] pkcs12: the file or its password is wrong"):
        signing.load_key(str(path), "not-the-password")
    with pytest.raises(ConfigError, match=r"cannot read the file"):
        signing.load_key(str(tmp_path / "missing.p12"), "")
    assert "BEGIN" not in repr(signing.SigningKey.from_pkcs12(ca.pkcs12, ca.password))


def test_only_a_sign_task_may_carry_the_key(key: signing.SigningKey, tmp_path: Path) -> None:
    """The key never travels with a task that parses untrusted input (the worker signs in a process of
    its own, forked after validation)."""
    from docfence.sandbox import Task

    for kind in ("watermark", "report", "provider_check"):
        with pytest.raises(ValueError, match="only a sign task carries the signing key"):
            Task(kind, tmp_path / "in.pdf", tmp_path / "out.pdf", JobPolicy(), signing=key.to_request())
    secret = key.to_request()["key"]
    assert secret not in repr(Task("sign", tmp_path / "in.pdf", tmp_path / "out.pdf", JobPolicy(),
                                   signing=key.to_request()))


def test_the_signing_output_buffer_keeps_exactly_what_was_written() -> None:
    # pyHanko writes from 0, goes back to fill the byte range and the signature, and may outgrow the
    # room allocated up front: the bytes are everything up to the furthest position written
    out = signing._Output(16)
    out.write(b"%PDF-1.7 head ")
    out.write(b"and a tail longer than the room")
    end = out.tell()
    out.seek(4)
    out.write(b"!")
    assert out.written() == b"%PDF!1.7 head and a tail longer than the room"[:end]
    small = signing._Output(1024)
    small.write(b"%PDF-")
    assert small.written() == b"%PDF-"


def test_a_long_page_tree_reads_as_pyhanko_reads_it(key: signing.SigningKey) -> None:
    # the /Kids of 600 pages, matched whole by one expression: every reference, none given back
    data = engines.watermark_document(pdfs.many_pages(600), JobPolicy()).output
    signed = signing.sign(data, SigningSpec(visible=True, page="last"), key)
    assert all(c["ok"] for c in signing.prove(signed, SigningSpec(visible=True, page="last"), key,
                                              validated=data))
    with pikepdf.open(io.BytesIO(signed)) as pdf:
        assert len(pdf.pages) == 600 and "/Annots" in pdf.pages[-1]
