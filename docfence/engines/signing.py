"""The signing stage: a PAdES signature (pyHanko) added to a validated output as one incremental update,
and its proof: pyHanko's own validation, and a signed byte range that covers the whole file.

The key arrives as PKCS#12 bytes from the parent (the `[signing]` configuration); it never enters a
policy, a log or a report. Encrypted outputs are refused (SigningRefused; see SigningSpec).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import io
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Any

from docfence.core.errors import ConfigError, MalformedPdf, SigningRefused
from docfence.core.policy import SigningSpec
from docfence.engines.checks import Check, check

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
    # pyHanko's signed attributes for this certificate over _PLACEHOLDER_DIGEST, encoded once by the
    # parent (with_signed_attrs): a render process then fills in its document's digest (~15 ms of
    # asn1crypto encoding less per signed job). Empty: pyHanko builds them for each signature.
    signed_attrs_der: bytes = b""

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
        opened = cls(key.private_bytes(der, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
                     cert.public_bytes(der), tuple(c.public_bytes(der) for c in chain or ()))
        return opened.with_signed_attrs()

    def with_signed_attrs(self) -> SigningKey:
        """This key with `signed_attrs_der`: pyHanko's own signed attributes (PAdES, SHA-256, no
        timestamp: what `sign` asks for) over a placeholder digest that occurs once in their encoding."""
        from pyhanko.sign.signers.pdf_cms import PdfCMSSignedAttributes, Signer

        built = _run(Signer.signed_attrs(self.signer(), _PLACEHOLDER_DIGEST, "sha256",
                                         attr_settings=PdfCMSSignedAttributes(), use_pades=True))
        encoded = bytes(built.dump())
        return replace(self, signed_attrs_der=encoded if encoded.count(_PLACEHOLDER_DIGEST) == 1 else b"")

    def to_request(self) -> dict[str, Any]:
        return {"key": _b64(self.key_der), "cert": _b64(self.cert_der),
                "chain": [_b64(c) for c in self.chain_der], "signed_attrs": _b64(self.signed_attrs_der)}

    @classmethod
    def from_request(cls, given: Any) -> SigningKey | None:
        if not given:
            return None
        return cls(base64.b64decode(given["key"]), base64.b64decode(given["cert"]),
                   tuple(base64.b64decode(c) for c in given.get("chain", ())),
                   base64.b64decode(given.get("signed_attrs", "")))

    def signer(self) -> Any:
        """pyHanko's signer over this key, loaded once (see _LoadedKeySigner)."""
        from asn1crypto import keys, x509
        from pyhanko_certvalidator.registry import SimpleCertificateStore

        cert = x509.Certificate.load(self.cert_der)
        chain = [x509.Certificate.load(c) for c in self.chain_der]
        signer = _signer_class()(signing_cert=cert, signing_key=keys.PrivateKeyInfo.load(self.key_der),
                                 cert_registry=SimpleCertificateStore.from_certs([cert, *chain]))
        signer.signed_attrs_der = self.signed_attrs_der
        return signer

    def trust_roots(self) -> list[Any]:
        """The chain shipped in the PKCS#12 (its CA certificates), else the signer's own certificate:
        what the validator checks the chain against (recipients use their own trust store)."""
        from asn1crypto import x509

        return [x509.Certificate.load(c) for c in (self.chain_der or (self.cert_der,))]


_PLACEHOLDER_DIGEST = bytes(range(0xA0, 0xC0))  # SHA-256's length; found once in the encoding, or unused


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@functools.cache
def _signer_class() -> type:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
    from pyhanko.sign import signers
    from pyhanko_certvalidator.util import get_pyca_cryptography_hash

    class _LoadedKeySigner(signers.SimpleSigner):
        """pyHanko's SimpleSigner re-parses and re-checks the key on every signature (~30 ms of RSA
        key validation); this one parses it once, skipping the check the parent made at start-up, and
        hands pyHanko its signed attributes already encoded (see signed_attrs).
        PKCS#1 v1.5 RSA and ECDSA (what PKCS#12 files hold in practice) take the fast path; any other
        mechanism goes through pyHanko's own code."""

        _pyca_key: Any = None
        signed_attrs_der = b""

        async def signed_attrs(self, data_digest: bytes, digest_algorithm: str, attr_settings: Any = None,
                               content_type: str = "data", use_pades: bool = False, timestamper: Any = None,
                               dry_run: bool = False, is_pdf_sig: bool = True) -> Any:
            """pyHanko's signed attributes, as a parsed copy of their encoding: asn1crypto re-encodes a
            SET OF built from values on every dump (~10 ms of CPU for these 225 bytes), and pyHanko dumps
            them to sign them and again inside the CMS object; a parsed copy dumps the bytes it holds.
            For `sign`'s own request the encoding is the parent's (SigningKey.signed_attrs_der) with
            this document's digest in place of the placeholder: pyHanko's bytes, not rebuilt here.
            Their order cannot change: DER sorts the SET by each attribute's length before its digest."""
            from asn1crypto import cms

            plain = (attr_settings is None or (attr_settings.cades_signed_attrs is None
                                               and attr_settings.adobe_revinfo_attr is None))
            if (self.signed_attrs_der and plain and digest_algorithm == "sha256" and content_type == "data"
                    and use_pades and timestamper is None and not dry_run and is_pdf_sig
                    and len(data_digest) == len(_PLACEHOLDER_DIGEST)):
                return cms.CMSAttributes.load(self.signed_attrs_der.replace(_PLACEHOLDER_DIGEST, data_digest))
            built = await super().signed_attrs(data_digest, digest_algorithm, attr_settings, content_type,
                                               use_pades, timestamper, dry_run, is_pdf_sig)
            return cms.CMSAttributes.load(built.dump())

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


def warm_up(sample: bytes) -> None:
    """Sign and prove `sample` (a generated one-page PDF) with a throwaway self-signed key (RSA 2048,
    made here and dropped): the lazy imports and first-call set-up of pyHanko, asn1crypto and the certificate
    validator then happen once in the warm zygote, not in every signing process (~45 ms each)."""
    from datetime import timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    from docfence.core.clock import SystemClock
    from docfence.core.policy import SigningSpec
    now = SystemClock().now()
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "docfence warm-up")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(private.public_key())
            .serial_number(1).not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=1)).sign(private, hashes.SHA256()))
    der = serialization.Encoding.DER
    pkcs8 = private.private_bytes(der, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    key = SigningKey(pkcs8, cert.public_bytes(der)).with_signed_attrs()
    for visible in (False, True):
        spec = SigningSpec(visible=visible)
        prove(sign(sample, spec, key), spec, key)


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

    from docfence.engines.signing_reader import OnDemandXrefReader

    signer = key.signer()
    try:
        writer = IncrementalPdfFileWriter.from_reader(OnDemandXrefReader(io.BytesIO(data)))
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
    pdf_signer = signers.PdfSigner(meta, signer=signer, new_field_spec=field)
    # pyHanko hashes and returns only what it wrote into this buffer. A timestamp or revocation data
    # (post-signature processing, not configured here) would re-read it to its end: such a feature
    # needs an ordinary BytesIO
    output = _Output(len(data) + 2 * _reserve(key) + _UPDATE_ROOM)
    try:  # no validation context, so no network session to release (pyHanko's sync wrapper's extra)
        _run(pdf_signer.async_sign_pdf(writer, bytes_reserved=_reserve(key), output=output))
    except (PdfError, ValueError) as exc:
        raise MalformedPdf("the output could not be signed") from exc
    return output.written()


_UPDATE_ROOM = 64 * 1024  # the incremental update beside the signature: field, widget, page, xref


class _Output(io.BytesIO):
    """pyHanko's output, allocated once at about its final size. A BytesIO grows by 12.5% steps, each
    a reallocation: in a freshly forked render process copying a 1.2 MB document into one touched ~3,300
    new memory pages (a page fault each, ~15 ms of CPU on a VM) where one allocation touches ~310.
    pyHanko writes from position 0 and then only inside what it wrote, so the bytes are everything up
    to the furthest position written."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.seek(capacity - 1)
        super().write(b"\0")  # one allocation of `capacity`
        self.seek(0)
        self.end = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        written = super().write(data)
        self.end = max(self.end, self.tell())
        return written

    def written(self) -> bytes:
        self.truncate(self.end)
        return self.getvalue()  # shrinks the buffer in place: no copy


def _run(coro: Awaitable[Any]) -> Any:
    """Run one of pyHanko's coroutines (its synchronous entry points are thin wrappers over them) on a
    fresh event loop. Not through asyncio.run, as those wrappers do: on the main thread it installs a
    SIGINT handler bound to the task, and when it puts the previous one back, signal.getsignal formats
    that handler's repr, the task's repr with its result, and asn1crypto renders an ASN.1 result by
    encoding it again (~15 ms of CPU for the signed attributes, measured with cProfile). A process that
    ignores SIGINT (the sandbox's) pays nothing either way."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


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


def prove(data: bytes, spec: SigningSpec, key: SigningKey, *, validated: bytes | None = None) -> list[Check]:
    """`signature_valid` (pyHanko's validation: intact, the CMS signature valid, the chain trusted to
    the PKCS#12's CA, no revocation fetching) and `signature_covers_file` (the signed byte range is
    [0, a, b, len - b] with the gap exactly the /Contents string, so nothing was appended after the
    signature and the last revision is the signed one; and `validated`, when given, is the file's prefix
    before that gap: the validated bytes are what was signed, unchanged)."""
    from pyhanko.sign.validation import async_validate_pdf_signature
    from pyhanko_certvalidator import ValidationContext

    from docfence.engines.signing_reader import OnDemandXrefReader

    reader = OnDemandXrefReader(io.BytesIO(data))
    signatures = [s for s in reader.embedded_signatures if s.field_name == spec.field_name]
    if len(signatures) != 1:
        found = f"{len(signatures)} signatures named {spec.field_name}"
        return [check("signature_valid", [found]), check("signature_covers_file", [found])]
    context = ValidationContext(trust_roots=key.trust_roots(), allow_fetching=False)
    # no diff analysis: it reviews revisions after the signature, and `covers_file` requires none
    try:
        status = _run(async_validate_pdf_signature(signatures[0], context, skip_diff=True))
    finally:
        _run(context.aclose())  # what pyHanko's synchronous wrapper does; nothing is open without fetching
    valid: list[str] = []
    if not status.intact:
        valid.append("the signed bytes changed")
    if not status.valid:
        valid.append("the signature does not verify")
    if not status.trusted:
        valid.append("the signer's chain does not lead to the configured CA")
    signer = status.signing_cert.subject.human_friendly if status.signing_cert else ""
    return [check("signature_valid", valid, validator="pyHanko", signer=signer, visible=spec.visible,
                  subfilter="ETSI.CAdES.detached"),
            check("signature_covers_file", _coverage(data, signatures[0], status, validated),
                  method="pyHanko's coverage level; the byte range, its gap and the validated prefix")]


def _coverage(data: bytes, signature: Any, status: Any, validated: bytes | None) -> list[str]:
    """What keeps the signed byte range from being the whole file but the signature's own /Contents.
    pyHanko's ENTIRE_FILE compares lengths only; the gap's place and bytes are checked here too."""
    from pyhanko.sign.validation.status import SignatureCoverageLevel

    failures = [] if status.coverage == SignatureCoverageLevel.ENTIRE_FILE else [
        f"the signature covers {status.coverage.name.lower().replace('_', ' ')}, not the whole file"]
    ranges = [int(n) for n in signature.byte_range]
    if len(ranges) != 4 or ranges[0] != 0 or ranges[2] + ranges[3] != len(data) or ranges[1] > ranges[2]:
        return [*failures, f"the byte range {ranges} is not [0, a, b, {len(data)} - b]"]
    gap = data[ranges[1]:ranges[2]]
    contents = signature.pkcs7_content  # the string's bytes as stored, padding included
    if gap.lower() != b"<" + binascii.hexlify(contents) + b">":
        failures.append("the byte range's gap is not exactly the signature's /Contents string")
    if validated is not None and (ranges[1] < len(validated) or not data.startswith(validated)):
        failures.append("the validated bytes are not the signed file's prefix before the signature")
    return failures


__all__ = ["SigningKey", "load_key", "prove", "sign"]
