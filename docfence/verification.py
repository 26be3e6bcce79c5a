"""Public verification of issued documents: the code a document's QR carries, and the only answers a
recipient gets about it (issuer name, issue time, artifact sha256, deleted or not; match or no match).

The code is HMAC-SHA256(secret, job id, input sha256), 80 bits in base32, made at submission and frozen
in the job's policy. It cannot be the artifact's own hash (the QR is inside the artifact); the POST
checks the artifact's sha256. The code gates the public answer: a job id alone (it appears in logs,
consoles and other tenants' guesses) gets the same 404 as an unknown id.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass, replace
from datetime import datetime
from typing import BinaryIO

from docfence.config import Settings
from docfence.core.errors import InvalidRequest, NotFound
from docfence.core.policy import JobPolicy
from docfence.core.records import Artifact, Job
from docfence.core.states import JobState
from docfence.store.base import JobStore

CODE_LENGTH = 16  # base32 characters: 80 bits, not guessable at any rate the limiter allows
_CODE_RE = re.compile(r"[A-Z2-7]{16}")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_UNKNOWN = "no verifiable document with this id and code"


def verification_code(secret: bytes, job_id: str, input_sha256: str) -> str:
    mac = hmac.new(secret, b"docfence-verify-v1\0" + f"{job_id}\0{input_sha256}".encode(), hashlib.sha256)
    return base64.b32encode(mac.digest()).decode("ascii")[:CODE_LENGTH]


@dataclass(frozen=True)
class PublicRecord:
    """Everything a recipient is told about an issued document; nothing of its content or tenant."""

    organisation: str
    issued_at: datetime
    sha256: str
    deleted: bool


class Verifier:
    """Issues codes at submission and answers the public verification routes."""

    def __init__(self, settings: Settings, store: JobStore, secret: bytes) -> None:
        self.settings, self.store, self._secret = settings, store, secret

    def issue(self, policy: JobPolicy, job_id: str, input_sha256: str) -> JobPolicy:
        """`policy` with its verification URL and code filled in (unchanged without verification)."""
        spec = policy.verification
        if spec is None:
            return policy
        code = verification_code(self._secret, job_id, input_sha256)
        base = self.settings.verification.public_base_url.rstrip("/")
        return policy.evolve(verification=replace(spec, url=f"{base}/v1/verify/{job_id}?c={code}", code=code))

    def record(self, job_id: str, code: str | None) -> PublicRecord:
        """NotFound, with one message, for an unknown id, a wrong code, a job issued without a code or
        not (yet) succeeded: none of those can be told apart from outside."""
        job, artifact = self._issued(job_id, code)
        return PublicRecord(
            organisation=self.settings.verification.organisation, issued_at=artifact.created_at,
            sha256=artifact.sha256, deleted=job.deleted_at is not None or artifact.deleted_at is not None)

    def matches(self, job_id: str, code: str | None, *, sha256: str | None = None,
                file: BinaryIO | None = None) -> tuple[bool, str]:
        """(whether the document matches the issued artifact, the sha256 compared). Exactly one of
        `sha256` (hex) and `file` must be given; InvalidRequest otherwise."""
        if (sha256 is None) == (file is None):
            raise InvalidRequest("give either the file or its sha256, not both", field="sha256")
        if sha256 is not None:
            sha256 = sha256.strip().lower()
            if not _SHA256_RE.fullmatch(sha256):
                raise InvalidRequest("sha256 must be 64 hexadecimal characters", field="sha256")
        _, artifact = self._issued(job_id, code)
        if file is not None:
            digest = hashlib.sha256()
            for chunk in iter(lambda: file.read(1024 * 1024), b""):
                digest.update(chunk)
            sha256 = digest.hexdigest()
        assert sha256 is not None
        return hmac.compare_digest(sha256, artifact.sha256), sha256

    def _issued(self, job_id: str, code: str | None) -> tuple[Job, Artifact]:
        if not code or not _CODE_RE.fullmatch(code):
            raise NotFound(_UNKNOWN)
        try:
            job = self.store.get(job_id)
        except NotFound:
            raise NotFound(_UNKNOWN) from None
        spec = job.policy.verification
        if spec is None or not hmac.compare_digest(spec.code, code) or job.state is not JobState.SUCCEEDED:
            raise NotFound(_UNKNOWN)
        artifact = self.store.artifact(job.id)
        if artifact is None:
            raise NotFound(_UNKNOWN)
        return job, artifact


__all__ = ["CODE_LENGTH", "PublicRecord", "Verifier", "verification_code"]
