"""S3BlobStore: artifacts in one S3-compatible bucket under an optional folder prefix, through boto3.
Every object records its sha256 (user metadata plus an S3 SHA256 checksum); botocore errors are
translated to docfence's by error code at this boundary, never by message text. Every call is bounded
(S3Timeouts): a black-holed endpoint fails the call with BlobError, it never blocks it."""

from __future__ import annotations

import base64
import builtins
import contextlib
import hashlib
import logging
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from docfence.blobs.base import (
    BlobInfo,
    BlobReader,
    Readable,
    check_max_bytes,
    normalize_prefix,
    read_limited,
    translated_os_errors,
    validate_key,
    validate_sha256,
)
from docfence.core.errors import BlobError, BlobIntegrityError, BlobNotFound, ConfigError, StorageFull

log = logging.getLogger(__name__)

SHA256_METADATA = "sha256"  # stored as x-amz-meta-sha256: lower-case hex of the whole object
MIN_PART_SIZE = 5 * 1024 * 1024  # S3's minimum for every part but the last
DEFAULT_PART_SIZE = 8 * 1024 * 1024
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})  # HEAD answers carry only the status
# S3 has no ENOSPC; these S3-compatible servers' codes mean "no room for this write": MinIO's full drives
# (507) and bucket quota, Ceph RGW's user/bucket quota, and InsufficientCapacity (507) of other servers.
_FULL_CODES = frozenset({"XMinioStorageFull", "XMinioAdminBucketQuotaExceeded", "QuotaExceeded",
                         "InsufficientCapacity"})
_INSUFFICIENT_STORAGE = 507  # HTTP status: whatever the code, the server says it has no room
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_DELETE_BATCH = 1000  # DeleteObjects limit


@dataclass(frozen=True)
class S3Timeouts:
    """Bounds of every S3 call: a connection is given `connect_s`, each wait for bytes `read_s` (a slow
    transfer that keeps moving goes on), and botocore makes at most `max_attempts` tries (its standard
    retry mode, jittered back-off). The defaults bound a call to about 2 x (3 + 8) s plus one back-off,
    under the default lease (30 s): a caller whose storage went silent gets BlobError while its lease
    still holds, and longer outages are for the caller to retry. A `client` given to S3BlobStore
    brings its own configuration instead."""

    connect_s: float = 3.0
    read_s: float = 8.0
    max_attempts: int = 2

    def __post_init__(self) -> None:
        if not (self.connect_s > 0 and self.read_s > 0):
            raise ConfigError("S3 connect and read timeouts must be positive")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) \
                or self.max_attempts < 1:
            raise ConfigError("S3 max_attempts must be a positive integer")


class S3BlobStore:
    """BlobStore over an S3 bucket. Objects are private (no ACL is ever sent); `server_side_encryption`
    ("AES256" or "aws:kms") is passed on every write when set. `put_stream` spools to a local temp file
    (in `spool_dir`) while hashing, so the limit is enforced before any byte reaches the bucket."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        client: Any | None = None,
        part_size: int = DEFAULT_PART_SIZE,
        server_side_encryption: str | None = None,
        spool_dir: Path | None = None,
        timeouts: S3Timeouts | None = None,
    ) -> None:
        if not _BUCKET.fullmatch(bucket):
            raise ConfigError(f"invalid S3 bucket name {bucket!r}")
        if part_size < MIN_PART_SIZE:
            raise ConfigError(f"part_size must be at least {MIN_PART_SIZE} bytes")
        self.bucket = bucket
        self.prefix = normalize_prefix(prefix)
        self._part_size = part_size
        self._spool_dir = str(spool_dir) if spool_dir is not None else None
        self._sse: dict[str, str] = (
            {"ServerSideEncryption": server_side_encryption} if server_side_encryption else {}
        )
        self.timeouts = timeouts or S3Timeouts()
        self._client = client or _make_client(endpoint_url, region_name, self.timeouts)

    def __repr__(self) -> str:
        return f"S3BlobStore(bucket={self.bucket!r}, prefix={self.prefix!r})"

    # -- writing ---------------------------------------------------------------------------------------

    def put(self, key: str, data: bytes) -> BlobInfo:
        full = self._full(key)
        info = BlobInfo(key=key, sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
        self._put_object(full, bytes(data), info)
        return info

    def put_stream(self, key: str, stream: Readable, *, max_bytes: int) -> BlobInfo:
        full = self._full(key)
        check_max_bytes(max_bytes)
        spooling = f"spool object {key!r} on local disk"  # a full spool disk is StorageFull too
        with tempfile.SpooledTemporaryFile(max_size=self._part_size, dir=self._spool_dir) as spool:
            digest, size = hashlib.sha256(), 0
            for chunk in read_limited(stream, max_bytes):  # raises before anything reaches the bucket
                with translated_os_errors(spooling):  # only the spool's: the source's errors pass as-is
                    spool.write(chunk)
                digest.update(chunk)
                size += len(chunk)
            with translated_os_errors(spooling):
                spool.seek(0)
            info = BlobInfo(key=key, sha256=digest.hexdigest(), bytes=size)
            if size <= self._part_size:
                with translated_os_errors(spooling):
                    data = spool.read()
                self._put_object(full, data, info)
            else:
                self._put_multipart(full, spool, info)
        return info

    def _put_object(self, full: str, data: bytes, info: BlobInfo) -> None:
        self._call(
            "put",
            info.key,
            self._client.put_object,
            Bucket=self.bucket,
            Key=full,
            Body=data,
            ChecksumSHA256=_b64(bytes.fromhex(info.sha256)),
            Metadata={SHA256_METADATA: info.sha256},
            ContentType="application/octet-stream",
            **self._sse,
        )

    def _put_multipart(self, full: str, spool: IO[bytes], info: BlobInfo) -> None:
        """Upload in parts, each with its own SHA256 checksum; any failure aborts the upload."""
        common = {"Bucket": self.bucket, "Key": full}
        created = self._call(
            "put",
            info.key,
            self._client.create_multipart_upload,
            ChecksumAlgorithm="SHA256",
            Metadata={SHA256_METADATA: info.sha256},
            ContentType="application/octet-stream",
            **common,
            **self._sse,
        )
        upload = {**common, "UploadId": created["UploadId"]}
        try:
            parts: builtins.list[dict[str, Any]] = []
            while chunk := _read_spool(spool, self._part_size, info.key):
                number, checksum = len(parts) + 1, _b64(hashlib.sha256(chunk).digest())
                answer = self._call(
                    "put", info.key, self._client.upload_part,
                    PartNumber=number, Body=chunk, ChecksumSHA256=checksum, **upload,
                )  # fmt: skip
                parts.append({"PartNumber": number, "ETag": answer["ETag"], "ChecksumSHA256": checksum})
            self._call(
                "put", info.key, self._client.complete_multipart_upload,
                MultipartUpload={"Parts": parts}, **upload,
            )  # fmt: skip
        except BaseException:
            with contextlib.suppress(BlobError):
                self._call("abort", info.key, self._client.abort_multipart_upload, **upload)
            raise

    # -- reading ---------------------------------------------------------------------------------------

    def get(self, key: str, *, expected_sha256: str | None = None) -> bytes:
        with self.open_read(key, expected_sha256=expected_sha256) as reader:
            return reader.read()

    def open_read(self, key: str, *, expected_sha256: str | None = None) -> BlobReader:
        """Verifies against `expected_sha256` and, always, against the sha256 recorded at write time."""
        validate_sha256(expected_sha256)
        answer = self._call("get", key, self._client.get_object, Bucket=self.bucket, Key=self._full(key))
        recorded = answer.get("Metadata", {}).get(SHA256_METADATA)
        if expected_sha256 is not None and recorded is not None and recorded != expected_sha256:
            answer["Body"].close()
            raise BlobIntegrityError(f"sha256 mismatch reading {key!r}")
        body = _Body(answer["Body"], key)
        return BlobReader(key, body, answer["ContentLength"], expected_sha256 or recorded)

    def stat(self, key: str) -> BlobInfo | None:
        """Size and the sha256 recorded at write time (computed by reading, for foreign objects)."""
        answer = self._head(key)
        if answer is None:
            return None
        recorded = answer.get("Metadata", {}).get(SHA256_METADATA)
        if recorded is None:
            digest = hashlib.sha256()
            with self.open_read(key) as reader:
                for chunk in reader.iter_chunks():
                    digest.update(chunk)
            recorded = digest.hexdigest()
        return BlobInfo(key=key, sha256=recorded, bytes=answer["ContentLength"])

    def exists(self, key: str) -> bool:
        return self._head(key) is not None

    def modified_at(self, key: str) -> datetime | None:
        """The object's Last-Modified (the server's clock, whole seconds)."""
        answer = self._head(key)
        if answer is None:
            return None
        modified: datetime = answer["LastModified"]
        return modified if modified.tzinfo else modified.replace(tzinfo=UTC)

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            answer: dict[str, Any] = self._call(
                "head", key, self._client.head_object, Bucket=self.bucket, Key=self._full(key)
            )
        except BlobNotFound:
            return None
        return answer

    def list(self, prefix: str = "") -> Iterator[str]:
        folder = self.prefix + normalize_prefix(prefix)  # validated now, not on first next()
        return (full[len(self.prefix) :] for full in self._list_full(folder))

    def _list_full(self, folder: str) -> Iterator[str]:
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=folder):
                for item in page.get("Contents", []):
                    yield item["Key"]
        except ClientError as exc:
            raise _translate(exc, "list", folder) from exc
        except BotoCoreError as exc:
            raise BlobError(f"s3 list of {folder!r} failed: {type(exc).__name__}") from exc

    # -- deleting --------------------------------------------------------------------------------------

    def delete(self, key: str) -> bool:
        """False when absent. S3 deletes are idempotent; the HEAD before only informs the answer."""
        existed = self.exists(key)
        self._call("delete", key, self._client.delete_object, Bucket=self.bucket, Key=self._full(key))
        return existed

    def delete_prefix(self, prefix: str) -> int:
        folder_prefix = normalize_prefix(prefix)
        if not folder_prefix:
            raise ConfigError("delete_prefix needs a non-empty prefix")
        removed, batch = 0, builtins.list[str]()
        for full in self._list_full(self.prefix + folder_prefix):
            batch.append(full)
            if len(batch) == _DELETE_BATCH:
                removed += self._delete_batch(batch, folder_prefix)
                batch = []
        if batch:
            removed += self._delete_batch(batch, folder_prefix)
        log.info("deleted %d objects under prefix %r", removed, folder_prefix)
        return removed

    def _delete_batch(self, fulls: builtins.list[str], folder_prefix: str) -> int:
        answer = self._call(
            "delete", folder_prefix, self._client.delete_objects,
            Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in fulls], "Quiet": True},
        )  # fmt: skip
        errors = answer.get("Errors", [])
        if errors:
            codes = sorted({e.get("Code", "unknown") for e in errors})
            raise BlobError(f"s3 could not delete {len(errors)} objects under {folder_prefix!r}: {codes}")
        return len(fulls)

    # -- plumbing --------------------------------------------------------------------------------------

    def _full(self, key: str) -> str:
        return self.prefix + validate_key(key)

    def _call(self, op: str, key: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except ClientError as exc:
            raise _translate(exc, op, key) from exc
        except BotoCoreError as exc:  # connection refused, timeouts, bad credentials config...
            raise BlobError(f"s3 {op} of {key!r} failed: {type(exc).__name__}") from exc


class _Body:
    """botocore's StreamingBody, its errors translated: a read that times out or breaks off mid-object
    raises BlobError (retryable), like every other S3 failure."""

    def __init__(self, raw: Any, key: str) -> None:
        self._raw, self._key = raw, key

    def read(self, amt: int | None = None, /) -> bytes:
        try:
            data: bytes = self._raw.read(amt)
        except BotoCoreError as exc:
            raise BlobError(f"s3 get of {self._key!r} failed while reading: {type(exc).__name__}") from exc
        return data

    def close(self) -> None:
        with contextlib.suppress(BotoCoreError, OSError):
            self._raw.close()


def _read_spool(spool: IO[bytes], size: int, key: str) -> bytes:
    with translated_os_errors(f"spool object {key!r} on local disk"):
        return spool.read(size)


def _translate(exc: ClientError, op: str, key: str) -> BlobError:
    """By the error code (and, for 507, the HTTP status), never by the message text."""
    code = str(exc.response.get("Error", {}).get("Code", "") or "unknown")
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if code in _NOT_FOUND_CODES:
        return BlobNotFound(f"no object {key!r}")
    if code in _FULL_CODES or status == _INSUFFICIENT_STORAGE:
        return StorageFull(f"no space left in the bucket to {op} {key!r}: {code}")
    return BlobError(f"s3 {op} of {key!r} failed: {code}")


def _make_client(endpoint_url: str | None, region_name: str | None, timeouts: S3Timeouts) -> Any:
    """Credentials come from the standard boto3 chain (env vars, config files, instance roles)."""
    config = Config(
        retries={"mode": "standard", "total_max_attempts": timeouts.max_attempts},
        connect_timeout=timeouts.connect_s,
        read_timeout=timeouts.read_s,
        tcp_keepalive=True,  # a peer that vanished is noticed on idle pooled connections too
        # Custom endpoints (MinIO, moto, on-prem) rarely resolve virtual-hosted bucket names.
        s3={"addressing_style": "path"} if endpoint_url else {},
    )
    session = boto3.session.Session()
    return session.client("s3", endpoint_url=endpoint_url, region_name=region_name, config=config)


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")
