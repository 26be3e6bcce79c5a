"""A throwaway certificate authority for signing tests and benchmarks: a CA, a document-signing leaf it
issued, and the PKCS#12 file an operator would name in `[signing] pkcs12`. Made fresh at test time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from docfence.core.clock import SystemClock


@dataclass(frozen=True)
class ThrowawayCa:
    ca_pem: bytes
    pkcs12: bytes
    password: str


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example Health"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _cert(subject: str, issuer: str, public: rsa.RSAPublicKey, signing_key: rsa.RSAPrivateKey,
          *, ca: bool, now: datetime) -> x509.Certificate:
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(public).serial_number(x509.random_serial_number())
               .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=False, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
    else:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=True, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
            encipher_only=False, decipher_only=False), critical=True)
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.EMAIL_PROTECTION]),
                                        critical=False)
    return builder.sign(signing_key, hashes.SHA256())


def make_test_ca(password: str = "test-pkcs12-pass", now: datetime | None = None) -> ThrowawayCa:
    """A CA and a leaf valid from yesterday for 30 days, packed as PKCS#12 (leaf key, leaf, CA)."""
    now = now or SystemClock().now()
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    leaf_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = "Example Health Test CA"
    ca = _cert(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True, now=now)
    leaf = _cert("Example Health Documents", "Example Health Test CA", leaf_key.public_key(), ca_key,
                 ca=False, now=now)
    p12 = pkcs12.serialize_key_and_certificates(
        b"docfence", leaf_key, leaf, [ca], serialization.BestAvailableEncryption(password.encode()))
    return ThrowawayCa(ca.public_bytes(serialization.Encoding.PEM), p12, password)


def write_test_ca(folder: Path, password: str = "test-pkcs12-pass") -> tuple[Path, ThrowawayCa]:
    """The PKCS#12 file written into `folder` (mode 0600, as an operator would keep it) and the CA."""
    made = make_test_ca(password)
    path = folder / "signer.p12"
    path.write_bytes(made.pkcs12)
    path.chmod(0o600)
    return path, made
