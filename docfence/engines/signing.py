"""The signing stage: a PAdES signature (pyHanko) added to a validated output as one incremental update,
and its proof: pyHanko's own validation, and a signed byte range that covers the whole file.

The key arrives as PKCS#12 bytes from the parent (the `[signing]` configuration); it never enters a
policy, a log or a report. Encrypted outputs are refused (SigningRefused; see SigningSpec).
"""

from __future__ import annotations

import base64
import functools
import io
from dataclasses import dataclass
from typing import Any

from docfence.core.errors import ConfigError, MalformedPdf, SigningRefused
from docfence.core.policy import SigningSpec
from docfence.engines.validate import Check, check

SIGNATURE_BOX_PT = (220.0, 54.0)  # a visible signature's box, at the bottom-left of its page
_MARGIN_PT = 54.0  # as the verification code's default: clear of a footer mark


@dataclass(frozen=True)
class SigningKey:
    """The organisation's key, certificate and chain (DER), opened once from the PKCS#12 file by the
    parent at start-up and handed to each render process with its task (a socket to our own child),
    so a render process neither decrypts the PKCS#12 nor re-checks the RSA key on every job."""

    key_der: bytes  # PKCS#8, unencrypted: it lives only in memory and on the parent-child socket
    cert_der: bytes
    chain_der: tuple[bytes, ...] = ()

    def __repr__(self) -> str:  # never print key material
        return f"SigningKey(<{len(self.chain_der) + 1} certificates>)"

    @classmethod
    def from_pkcs12(cls, data: bytes, password: str, *, label: str = "[signing] pkcs12") -> SigningKey:
        """ConfigError naming `label` when the file, its password or its content is wrong."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12

        try:
            key, cert, chain = pkcs12.load_key_and_certificates(data, password.encode() or None)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{label}: the file or its password is wrong") from exc
        if key is None or cert is None:
            raise ConfigError(f"{label}: the file holds no private key and certificate")
        der = serialization.Encoding.DER
        return cls(key.private_bytes(der, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
                   cert.public_bytes(der), tuple(c.public_bytes(der) for c in chain or ()))

    def to_request(self) -> dict[str, Any]:
        return {"key": _b64(self.key_der), "cert": _b64(self.cert_der),
                "chain": [_b64(c) for c in self.chain_der]}

    @classmethod
    def from_request(cls, given: Any) -> SigningKey | None:
        if not given:
            return None
        return cls(base64.b64decode(given["key"]), base64.b64decode(given["cert"]),
                   tuple(base64.b64decode(c) for c in given.get("chain", ())))

    def signer(self) -> Any:
        """pyHanko's signer over this key, loaded once (see _LoadedKeySigner)."""
        from asn1crypto import keys, x509
        from pyhanko_certvalidator.registry import SimpleCertificateStore

        cert = x509.Certificate.load(self.cert_der)
        chain = [x509.Certificate.load(c) for c in self.chain_der]
        return _signer_class()(signing_cert=cert, signing_key=keys.PrivateKeyInfo.load(self.key_der),
                               cert_registry=SimpleCertificateStore.from_certs([cert, *chain]))

    def trust_roots(self) -> list[Any]:
        """The chain shipped in the PKCS#12 (its CA certificates), else the signer's own certificate:
        what the validator checks the chain against (recipients use their own trust store)."""
        from asn1crypto import x509

        return [x509.Certificate.load(c) for c in (self.chain_der or (self.cert_der,))]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@functools.cache
def _signer_class() -> type:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
    from pyhanko.sign import signers
    from pyhanko.sign.general import get_pyca_cryptography_hash

    class _LoadedKeySigner(signers.SimpleSigner):  # type: ignore[misc]
        """pyHanko's SimpleSigner re-parses and re-checks the key on every signature (~30 ms of RSA
        key validation); this one parses it once, skipping the check the parent made at start-up.
        PKCS#1 v1.5 RSA and ECDSA (what PKCS#12 files hold in practice) take the fast path; any other
        mechanism goes through pyHanko's own code."""

        _pyca_key: Any = None

        def sign_raw(self, data: bytes, digest_algorithm: str) -> bytes:
            mechanism = self.get_signature_mechanism_for_digest(digest_algorithm).signature_algo
            if mechanism not in ("rsassa_pkcs1v15", "ecdsa"):
                return bytes(super().sign_raw(data, digest_algorithm))
            if self._pyca_key is None:
                self._pyca_key = serialization.load_der_private_key(
                    self.signing_key.dump(), password=None, unsafe_skip_rsa_key_validation=True)
            hash_algo = get_pyca_cryptography_hash(digest_algorithm)
            if isinstance(self._pyca_key, rsa.RSAPrivateKey):
                return self._pyca_key.sign(data, padding.PKCS1v15(), hash_algo)
            if isinstance(self._pyca_key, ec.EllipticCurvePrivateKey):
                return self._pyca_key.sign(data, ec.ECDSA(hash_algo))
            return bytes(super().sign_raw(data, digest_algorithm))

    return _LoadedKeySigner


def warm_up() -> None:
    """Sign and prove a generated one-page PDF with a throwaway self-signed key (RSA 2048, made here and
    dropped): the lazy imports and first-call set-up of pyHanko, asn1crypto and the certificate
    validator then happen once in the warm zygote, not in every signing process (~45 ms each)."""
    from datetime import timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    from docfence.core.clock import SystemClock
    from docfence.core.policy import SigningSpec
    from docfence.samples.pdfs import many_pages

    now = SystemClock().now()
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "docfence warm-up")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(private.public_key())
            .serial_number(1).not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=1)).sign(private, hashes.SHA256()))
    der = serialization.Encoding.DER
    pkcs8 = private.private_bytes(der, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    key = SigningKey(pkcs8, cert.public_bytes(der))
    for visible in (False, True):
        spec = SigningSpec(visible=visible)
        prove(sign(many_pages(1), spec, key), spec, key)


def load_key(path: str, password: str) -> SigningKey:
    """Read and open the configured PKCS#12 once at start-up, so a wrong file or password stops the
    worker there rather than failing every signed job."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ConfigError(f"[signing] pkcs12={path!r}: cannot read the file ({exc.strerror})") from exc
    key = SigningKey.from_pkcs12(data, password)
    key.signer()
    return key


def sign(data: bytes, spec: SigningSpec, key: SigningKey) -> bytes:
    """`data` with one incremental update holding the signature. Raises SigningRefused for an
    encrypted document and MalformedPdf when pyHanko cannot append to it."""
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.pdf_utils.misc import PdfError
    from pyhanko.sign import fields, signers

    signer = key.signer()
    try:
        writer = IncrementalPdfFileWriter(io.BytesIO(data), strict=False)
    except PdfError as exc:
        raise MalformedPdf("the validated output could not be opened for signing") from exc
    if writer.prev.encrypted:
        raise SigningRefused()
    # an invisible signature's (zero-size) widget goes on the first page: pyHanko finds page n by
    # reading every page object before it, so a widget on the last page of a long document costs
    # O(pages) object reads (~1 ms each); only a visible box on the last page pays that
    page = -1 if spec.visible and spec.page == "last" else 0
    box = _box(writer, page) if spec.visible else None
    meta = signers.PdfSignatureMetadata(field_name=spec.field_name, reason=spec.reason or None,
                                        subfilter=fields.SigSeedSubFilter.PADES, md_algorithm="sha256")
    field = fields.SigFieldSpec(spec.field_name, on_page=page, box=box)
    try:
        out = signers.sign_pdf(writer, meta, signer=signer, new_field_spec=field,
                               bytes_reserved=_reserve(key))
    except (PdfError, ValueError) as exc:
        raise MalformedPdf("the output could not be signed") from exc
    return bytes(out.getvalue())


def _reserve(key: SigningKey) -> int:
    """Bytes for the CMS object: its certificates, the signature and attributes, with room to spare.
    Given, it spares pyHanko a dry-run signature made only to measure the size (half its time)."""
    return 2 * (len(key.cert_der) + sum(len(c) for c in key.chain_der)) + 4096


def _box(writer: Any, page: int) -> tuple[int, int, int, int]:
    """The visible signature's rectangle: bottom-left of the page's visible box (user space)."""
    ref, _ = writer.find_page_for_modification(page)
    obj = ref.get_object()
    box = obj.get("/CropBox") or obj.get("/MediaBox") or [0, 0, 612, 792]
    x0, y0 = float(box[0]), float(box[1])
    width, height = SIGNATURE_BOX_PT
    return (round(x0 + _MARGIN_PT), round(y0 + _MARGIN_PT), round(x0 + _MARGIN_PT + width),
            round(y0 + _MARGIN_PT + height))


def prove(data: bytes, spec: SigningSpec, key: SigningKey) -> list[Check]:
    """`signature_valid` (pyHanko: intact, the CMS signature valid, the chain trusted to the PKCS#12's
    CA, no revocation fetching) and `signature_covers_file` (the signed byte range is the whole file:
    nothing was appended after the signature, so the last revision is the signed one)."""
    from pyhanko.pdf_utils.reader import PdfFileReader
    from pyhanko.sign.validation import validate_pdf_signature
    from pyhanko.sign.validation.status import SignatureCoverageLevel
    from pyhanko_certvalidator import ValidationContext

    reader = PdfFileReader(io.BytesIO(data), strict=False)
    signatures = [s for s in reader.embedded_signatures if s.field_name == spec.field_name]
    if len(signatures) != 1:
        found = f"{len(signatures)} signatures named {spec.field_name}"
        return [check("signature_valid", [found]), check("signature_covers_file", [found])]
    context = ValidationContext(trust_roots=key.trust_roots(), allow_fetching=False)
    # no diff analysis: it reviews revisions after the signature, and `covers_file` requires none
    status = validate_pdf_signature(signatures[0], context, skip_diff=True)
    valid: list[str] = []
    if not status.intact:
        valid.append("the signed bytes changed")
    if not status.valid:
        valid.append("the signature does not verify")
    if not status.trusted:
        valid.append("the signer's chain does not lead to the configured CA")
    covers = [] if status.coverage == SignatureCoverageLevel.ENTIRE_FILE else [
        f"the signature covers {status.coverage.name.lower().replace('_', ' ')}, not the whole file"]
    signer = status.signing_cert.subject.human_friendly if status.signing_cert else ""
    return [check("signature_valid", valid, validator="pyHanko", signer=signer, visible=spec.visible,
                  subfilter="ETSI.CAdES.detached"),
            check("signature_covers_file", covers, method="signed byte range against the file length")]


__all__ = ["SigningKey", "load_key", "prove", "sign"]
