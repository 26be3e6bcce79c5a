"""Owner-restricted files (owner password only) are watermarked by default with their encryption kept
exactly as it was, judged by qpdf --show-encryption on input and output (issue 29)."""

from __future__ import annotations

import io
import re
import subprocess
from pathlib import Path
from typing import Literal

import pikepdf
import pytest

from docfence import engines
from docfence.config.classes import classes_from
from docfence.core.errors import ConfigError, EncryptionForbidsModification
from docfence.core.policy import JobPolicy
from docfence.samples import pdfs

OWNER = "owner-only-sekrit"
# (R, aes, permissions): the algorithms owner-restricted files arrive with, various permission bits
CASES: dict[str, tuple[Literal[2, 3, 4, 5, 6], bool, pikepdf.Permissions]] = {
    "aes128-r4": (4, True, pikepdf.Permissions(modify_other=False, extract=False, modify_assembly=False)),
    "aes256-r6": (6, True, pikepdf.Permissions(modify_other=False, print_highres=False)),
    "rc4-128-r3": (3, False, pikepdf.Permissions(modify_other=False, modify_annotation=False,
                                                 modify_form=False)),
    "rc4-128-r4": (4, False, pikepdf.Permissions(extract=False, accessibility=False, modify_other=False)),
}


def _restricted(r: Literal[2, 3, 4, 5, 6], aes: bool, allow: pikepdf.Permissions) -> bytes:
    source = pikepdf.open(io.BytesIO(pdfs.many_pages(2)))
    buf = io.BytesIO()
    source.save(buf, encryption=pikepdf.Encryption(owner=OWNER, user="", R=r, aes=aes, allow=allow,
                                                         metadata=aes),
                object_stream_mode=pikepdf.ObjectStreamMode.disable)
    return buf.getvalue()


def _without_length(data: bytes) -> bytes:
    """The same file with /Length removed from its /Encrypt dictionary (the byte offsets stay valid)."""
    marker = re.search(rb"/Filter\s*/Standard", data)
    assert marker is not None
    start, end = data.rfind(b" obj", 0, marker.start()), data.find(b"endobj", marker.start())
    head, rest = data[start:end].split(b"/Filter", 1)  # the crypt filter's own /Length stays
    edited = head + b"/Filter" + re.sub(rb"/Length\s+\d+", lambda m: b" " * len(m.group()), rest, count=1)
    assert edited != data[start:end]
    return data[:start] + edited + data[end:]


def _show_encryption(data: bytes, tmp_path: Path) -> list[str]:
    path = tmp_path / "shown.pdf"
    path.write_bytes(data)
    done = subprocess.run(["qpdf", "--show-encryption", str(path)], capture_output=True, check=True)
    # everything qpdf says of the encryption but which password opened it
    return [line for line in done.stdout.decode().splitlines() if "password" not in line.lower()]


def _qpdf_check(data: bytes, tmp_path: Path) -> int:
    path = tmp_path / "checked.pdf"
    path.write_bytes(data)
    return subprocess.run(["qpdf", "--check", str(path)], capture_output=True, check=False).returncode


def _assert_kept(data: bytes, tmp_path: Path, *, rc4_v4: bool = False) -> dict[str, object]:
    result = engines.watermark_document(data, JobPolicy())  # the built-in default
    shown_in, shown_out = _show_encryption(data, tmp_path), _show_encryption(result.output, tmp_path)
    if rc4_v4:  # qpdf writes V4 back with AES (the one change, stated in the report's note)
        shown_in = [line.replace(": RC4", ": AESv2") for line in shown_in]
    assert shown_out == shown_in and any(line.startswith("R = ") for line in shown_in)
    assert _qpdf_check(result.output, tmp_path) == 0
    with pikepdf.open(io.BytesIO(data)) as before, pikepdf.open(io.BytesIO(result.output)) as after:
        assert not after.user_password_matched or after.encryption.user_password == b""  # no password
        assert (after.encryption.R, after.encryption.V, after.encryption.P, after.encryption.bits) == (
            before.encryption.R, before.encryption.V, before.encryption.P, before.encryption.bits)
        assert after.allow == before.allow
        if not rc4_v4:
            assert after.encryption.stream_method == before.encryption.stream_method
    with pikepdf.open(io.BytesIO(result.output), password=OWNER) as owner_view:
        assert owner_view.owner_password_matched  # the owner password is unchanged
    report = result.validation
    assert report["ok"] and report["encrypted"]
    checks = {check["name"]: check for check in report["checks"]}
    assert checks["watermark_structure"]["ok"] and checks["watermark_structure"]["pages_marked"] == 2
    return report


@pytest.mark.parametrize("case", sorted(CASES))
def test_default_class_keeps_encryption_and_permissions(case: str, tmp_path: Path) -> None:
    r, aes, _ = CASES[case]
    report = _assert_kept(_restricted(*CASES[case]), tmp_path, rc4_v4=r == 4 and not aes)
    kept = [note for note in report["notes"] if "encryption and permissions are kept" in note]  # type: ignore[attr-defined]
    algorithm = "AES-256 (V5, R6)" if r == 6 else f"{'AES' if aes else 'RC4'}-128 (V4, R4)" if r == 4 else \
        "RC4-128 (V2, R3)"
    assert len(kept) == 1 and algorithm in kept[0] and "owner password is unchanged" in kept[0]
    assert ("written as AES-128" in kept[0]) is (r == 4 and not aes)


def test_aes128_r4_without_length_is_kept(tmp_path: Path) -> None:
    """ISO 32000 lets a V4 dictionary omit /Length; qpdf writing the input's encryption back read it as
    key length 0 ("unsupported key length", engine_error)."""
    data = _without_length(_restricted(*CASES["aes128-r4"]))
    with pikepdf.open(io.BytesIO(data)) as pdf:
        assert "/Length" not in pdf.trailer.Encrypt and pdf.encryption.bits == 128
    report = _assert_kept(data, tmp_path)
    assert any("AES-128 (V4, R4)" in note for note in report["notes"])  # type: ignore[attr-defined]


def test_refuse_stays_a_class_choice() -> None:
    data = _restricted(*CASES["aes128-r4"])
    with pytest.raises(EncryptionForbidsModification):
        engines.watermark_document(data, JobPolicy(owner_password_policy="refuse"))
    classes = classes_from({"strict": {"owner_password_policy": "refuse"}}, builtin=True)
    assert classes["strict"].owner_password_policy == "refuse"
    assert classes["default"].owner_password_policy == "keep"
    with pytest.raises(ConfigError, match="owner_password_policy"):
        classes_from({"typo": {"owner_password_policy": "allow"}}, builtin=True)


def test_a_class_chooses_refuse_and_the_default_class_keeps(tmp_path: Path) -> None:
    """`[classes.NAME] owner_password_policy = "refuse"` reaches the job's policy; other classes keep."""
    from docfence.config import load_settings

    config = tmp_path / "docfence.toml"
    config.write_text('[classes.strict]\nowner_password_policy = "refuse"\n')
    settings = load_settings(config, env={})
    assert settings.policy_for("strict").owner_password_policy == "refuse"
    assert settings.policy_for(None).owner_password_policy == "keep"
