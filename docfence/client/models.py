"""Wire models as the client sees them: frozen views parsed from the API's JSON (no server imports)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KNOWN_STATES = ("queued", "rendering", "succeeded", "failed", "canceled")
TERMINAL_STATES = ("succeeded", "failed", "canceled")


@dataclass(frozen=True)
class ArtifactView:
    sha256: str
    bytes: int
    pages: int


@dataclass(frozen=True)
class JobView:
    id: str
    state: str
    attempt: int
    max_attempts: int
    mode: str
    document_class: str
    deadline_at: str
    created_at: str
    finished_at: str | None
    error_code: str | None
    error_message: str | None
    artifact: ArtifactView | None
    retry_after_s: float | None = None
    label: str | None = None
    filename: str | None = None
    marks: list[dict[str, Any]] = field(default_factory=list)  # kind, text template, placement
    fields: dict[str, str] = field(default_factory=dict)  # values; recipient "(hidden)" without rights
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @classmethod
    def from_json(cls, data: dict[str, Any], retry_after: str | None = None) -> JobView:
        error = data.get("error") or {}
        art = data.get("artifact")
        return cls(
            id=str(data["id"]), state=str(data["state"]), attempt=int(data.get("attempt", 0)),
            max_attempts=int(data.get("max_attempts", 0)), mode=str(data.get("mode", "")),
            document_class=str(data.get("document_class", "")), deadline_at=str(data.get("deadline_at", "")),
            created_at=str(data.get("created_at", "")), finished_at=data.get("finished_at"),
            error_code=error.get("code"), error_message=error.get("message"),
            artifact=ArtifactView(str(art["sha256"]), int(art["bytes"]), int(art["pages"])) if art else None,
            retry_after_s=_seconds(retry_after), label=data.get("label"), filename=data.get("filename"),
            raw=data, marks=list(data.get("marks") or []), fields=dict(data.get("fields") or {}),
        )


@dataclass(frozen=True)
class JobPage:
    """One page of `list_jobs`, newest first; `next_cursor` asks for the next (None: the last page)."""

    jobs: list[JobView]
    next_cursor: str | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobPage:
        return cls([JobView.from_json(j) for j in data.get("jobs", [])], data.get("next_cursor"))


@dataclass(frozen=True)
class BatchItemView:
    """One document's answer in a batch: `created`, `existing` (a replay) or `refused` (its error)."""

    index: int
    filename: str | None
    status: str
    job: JobView | None
    error_code: str | None = None
    error_message: str | None = None
    error_field: str | None = None


@dataclass(frozen=True)
class BatchView:
    items: list[BatchItemView]
    created: int
    existing: int
    refused: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchView:
        items = []
        for item in data.get("items", []):
            error = item.get("error") or {}
            job = JobView.from_json(item["job"]) if item.get("job") else None
            items.append(BatchItemView(int(item["index"]), item.get("filename"), str(item["status"]), job,
                                       error.get("code"), error.get("message"), error.get("field")))
        counts = (int(data.get(name, 0)) for name in ("created", "existing", "refused"))
        return cls(items, *counts)


def _seconds(value: str | None) -> float | None:
    """Retry-After as delta-seconds; an HTTP date or garbage is ignored (the backoff still applies)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0 <= seconds <= 3600 else None
