"""Artifacts: signed download URLs, and the download itself, which streams only bytes that match
the recorded sha256 and audits every download."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from docfence.blobs.base import BlobReader
from docfence.blobs.envelope import DataKey, open_chunks
from docfence.core import tokens
from docfence.core.access import Principal
from docfence.core.errors import (
    ArtifactGone,
    ArtifactNotReady,
    BlobIntegrityError,
    BlobNotFound,
    ConfigError,
    NotFound,
    SignedUrlRevoked,
)
from docfence.core.records import Artifact, Job
from docfence.core.states import JobState
from docfence.observability.metrics import count_encryption_failure
from docfence.service.artifacts_keys import job_keys, row_key
from docfence.service.base import ServiceState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Download:
    """An open, verifying stream of one artifact (close it when done)."""

    job_id: str
    attempt: int
    sha256: str
    size: int
    chunks: Iterator[bytes]
    close: Callable[[], None]


class Artifacts(ServiceState):
    """artifact_url_token, open_signed: the published artifact of a job."""

    def artifact_url_token(self, principal: Principal, job_id: str) -> str:
        """A short-lived token for `/v1/signed/{token}`; binds job, attempt, sha256, expiry and key."""
        principal.require("jobs.read")
        job = self._visible(principal, job_id)
        artifact = self._live_artifact(job)
        expires = int(self.clock.now().timestamp() + float(self.settings.signed_url_ttl_s))
        return tokens.sign({"j": job.id, "a": artifact.attempt, "s": artifact.sha256, "e": expires,
                            "k": principal.key_id}, self._secret)

    def open_signed(self, token: str) -> Download:
        """Verify the token, record a "download" audit event and open a verifying stream.

        Raises SignedUrlInvalid (tampered), SignedUrlExpired, SignedUrlRevoked (the minting key was
        revoked), ArtifactGone (deleted since signing). The stream never yields the artifact's last
        bytes unless every byte matched the recorded sha256 (see `_verified`)."""
        payload = tokens.verify(token, self._secret, self.clock.now().timestamp())
        minted_by = self.store.get_api_key(str(payload.get("k", "")))
        if minted_by is None or minted_by.revoked_at is not None:
            raise SignedUrlRevoked()
        try:
            job = self.store.get(str(payload["j"]))
        except NotFound:
            raise ArtifactGone() from None
        artifact = self._live_artifact(job)
        if artifact.attempt != payload["a"] or artifact.sha256 != payload["s"]:
            raise ArtifactGone("the artifact this link named is no longer published")
        try:
            data_key = job_keys(self).key_for(row_key(job))
        except (BlobIntegrityError, ConfigError) as exc:  # destroyed, corrupt, its KEK lost or unknown
            count_encryption_failure("unwrap", exc.code)
            raise
        try:  # a sealed object is opened while it streams; Content-Length stays the plaintext's size
            reader = self.router.for_region(job.region).open_read(
                artifact.key, expected_sha256=artifact.sha256 if data_key is None else None)
        except BlobNotFound:
            raise ArtifactGone() from None
        chunks = _plaintext(reader, data_key, artifact.key, artifact.sha256)
        with self._writes:
            self.store.record_event("download", actor=f"key:{payload['k']}", job_id=job.id,
                                    details={"attempt": artifact.attempt, "bytes": artifact.bytes})
        log.info("job %s attempt %d artifact downloaded", job.id, artifact.attempt)
        return Download(job.id, artifact.attempt, artifact.sha256, artifact.bytes,
                        self._verified(job, artifact, chunks), reader.close)

    def _verified(self, job: Job, artifact: Artifact, chunks: Iterator[bytes]) -> Iterator[bytes]:
        """Yield `chunks` one behind: the last chunk is released only once every byte was hashed, the
        count and the sha256 match the artifact record. On a mismatch nothing more is sent, the
        mismatch is audited ("download_integrity_failed") and BlobIntegrityError aborts the response,
        so a client never receives a complete body of bad bytes."""
        digest, sent, held = hashlib.sha256(), 0, None
        try:
            for chunk in chunks:
                digest.update(chunk)
                if held is not None:
                    sent += len(held)
                    yield held
                held = chunk
            total = sent + len(held or b"")
            if total != artifact.bytes or digest.hexdigest() != artifact.sha256:
                raise BlobIntegrityError(f"job {job.id} artifact does not match its sha256")
        except BlobIntegrityError:
            with self._writes:
                self.store.record_event("download_integrity_failed", actor="api", job_id=job.id,
                                        reason="sha256_mismatch",
                                        details={"attempt": artifact.attempt, "bytes_sent": sent})
            log.error("job %s attempt %d artifact failed its sha256; download aborted", job.id,
                      artifact.attempt)
            raise
        if held is not None:
            yield held

    def _live_artifact(self, job: Job) -> Artifact:
        if job.deleted_at is not None:
            raise ArtifactGone()
        if job.state is not JobState.SUCCEEDED:
            raise ArtifactNotReady(f"job {job.id} is {job.state.value}; it has no artifact")
        artifact = self.store.artifact(job.id)
        if artifact is None:
            raise ArtifactNotReady(f"job {job.id} has no artifact")
        if artifact.deleted_at is not None:
            raise ArtifactGone()
        return artifact


def _plaintext(reader: BlobReader, key: DataKey | None, object_key: str, sha256: str) -> Iterator[bytes]:
    """The artifact's plaintext chunks: opened under the job's data key (its header is checked at the
    first chunk, so a bad object aborts the response as any integrity failure does, and is audited),
    or read as is for a job stored before encryption."""
    if key is None:
        yield from reader.iter_chunks()
        return
    try:
        yield from open_chunks(reader, key, object_key, expected_sha256=sha256)
    except BlobIntegrityError as exc:
        count_encryption_failure("open", exc.code)
        raise
