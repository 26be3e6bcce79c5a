"""What a submission brings, checked before a job exists: the upload (sniffed as a PDF, capped), the
caller's label, the original filename, the PDF password; a batch's staged items and per-item answers;
the job list's filters and opaque cursor."""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime
from typing import BinaryIO, Literal

from docfence.blobs import BlobStore
from docfence.blobs.base import Readable
from docfence.core.errors import DocfenceError, EmptyUpload, InvalidRequest, UnsupportedUpload, UploadTooLarge
from docfence.core.records import Job, NewJob

MAX_LABEL = 200
MAX_FILENAME = 255
MAX_PASSWORD = 1024
SNIFF_BYTES = 1024  # a PDF's %PDF- header must start within these first bytes (as PDF readers accept)
MAX_BATCH_ITEMS = 200  # one batch is one transaction: bounded, so it never holds the store for long
_LABEL_RE = re.compile(r"[^\x00-\x1f\x7f]{1," + str(MAX_LABEL) + "}")


def check_label(label: str | None) -> str | None:
    """A label is 1-200 characters without control characters (empty means none)."""
    if label is None or label == "":
        return None
    if not _LABEL_RE.fullmatch(label):
        raise InvalidRequest(f"label must be 1-{MAX_LABEL} characters without control characters",
                             field="label")
    return label


def clean_filename(name: str | None) -> str | None:
    """The upload's own name without any folder (browsers and curl may send a path), without control
    characters, at most 255 characters; None when nothing is left."""
    if not name:
        return None
    base = re.split(r"[\\/]", name)[-1]
    base = "".join(ch for ch in base if unicodedata.category(ch)[0] != "C").strip()
    return base[:MAX_FILENAME] or None


def check_password(password: str | None) -> str | None:
    """The PDF password as given (empty means none); at most 1024 characters, no NUL."""
    if password is None or password == "":
        return None
    if len(password) > MAX_PASSWORD or "\x00" in password:
        raise InvalidRequest(f"password must be at most {MAX_PASSWORD} characters without NUL",
                             field="password")
    return password


@dataclass(frozen=True)
class BatchOutcome:
    """One item's answer in a batch: the job (created, or an earlier identical submission's), or
    the error that refused the item."""

    index: int
    job: Job | None = None
    created: bool = False
    error: DocfenceError | None = None

    @property
    def status(self) -> Literal["created", "existing", "refused"]:
        if self.error is not None:
            return "refused"
        return "created" if self.created else "existing"


def encode_cursor(job: Job) -> str:
    """The opaque cursor after `job` in a newest-first list: its creation time and id."""
    raw = f"{job.created_at.isoformat()}|{job.id}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The (created_at, id) a cursor from `encode_cursor` names; InvalidRequest (field cursor) else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("utf-8")
        at, sep, job_id = raw.partition("|")
        when = datetime.fromisoformat(at)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        when, sep, job_id = None, "", ""
    if not sep or not job_id or when is None or when.tzinfo is None:
        raise InvalidRequest("cursor: not a cursor this server returned (next_cursor)", field="cursor")
    return when, job_id


MAX_LIST_LIMIT = 200


@dataclass(frozen=True)
class JobQuery:
    """Filters of the job list (each optional; label and filename match exactly) and its page."""

    state: str | None = None
    document_class: str | None = None
    mode: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    label: str | None = None
    filename: str | None = None
    limit: int = 50
    cursor: str | None = None


@dataclass
class Staged:
    """An upload stored under its pre-chosen job id, not yet committed; `discard` removes its bytes."""

    new: NewJob
    blobs: BlobStore
    prefix: str

    def discard(self) -> None:
        self.blobs.delete_prefix(self.prefix)


def item_error(index: int, total: int, exc: DocfenceError) -> DocfenceError:
    """Item `index`'s error as the whole batch's: the same class (so the same status and code), the
    field as `items[i].<field>`; nothing of the batch was stored."""
    refused = type(exc)(f"item {index}: {exc.message} (the batch of {total} was refused whole; nothing "
                        "was stored; send partial=true to accept the other items)",
                        field=f"items[{index}].{exc.field or 'file'}")
    return refused




class CappedReader:
    """Reads through to `raw` and raises UploadTooLarge once more than `limit` bytes went by."""

    def __init__(self, raw: Readable, limit: int) -> None:
        self.raw, self.limit, self.total = raw, limit, 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.total += len(data)
        if self.total > self.limit:
            raise UploadTooLarge(f"the upload exceeds {self.limit} bytes; nothing was stored")
        return data


class SniffedPdf:
    """Reads through to `raw` once its first bytes proved a PDF: EmptyUpload (no bytes) or
    UnsupportedUpload (no `%PDF-` within the first SNIFF_BYTES) before anything is stored."""

    def __init__(self, raw: BinaryIO) -> None:
        head = b""
        while len(head) < SNIFF_BYTES:
            chunk = raw.read(SNIFF_BYTES - len(head))
            if not chunk:
                break
            head += chunk
        if not head:
            raise EmptyUpload("the upload is empty; send a PDF file")
        if b"%PDF-" not in head:
            raise UnsupportedUpload(f"the upload is not a PDF: no %PDF- header in its first {SNIFF_BYTES} "
                                    "bytes")
        self.raw, self.head = raw, head

    def read(self, n: int = -1) -> bytes:
        if self.head:
            if n < 0:
                data, self.head = self.head + self.raw.read(), b""
                return data
            data, self.head = self.head[:n], self.head[n:]
            return data
        return self.raw.read(n)
