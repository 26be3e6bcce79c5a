"""The integrator's surface over a real loopback server, on both stores: labels and filenames, the job
list (filters, cursor, tenant scope), batch submission (whole and partial), and POST /v1/jobs?wait=."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from docfence.client import Conflict, InvalidRequest, UnsupportedMediaType
from docfence.core.states import JobState

from .conftest import PDF, ApiEnv

NOT_PDF = b"PK\x03\x04 this is a zip file, not a PDF"


def _inputs(env: ApiEnv) -> list[Path]:
    return sorted(p for p in (env.tmp / "objects").rglob("*") if p.is_file())


def test_label_and_filename_travel_with_the_job_and_are_searchable(any_env: ApiEnv, tmp_path: Path) -> None:
    path = tmp_path / "upload" / "Q3 invoice.pdf"
    path.parent.mkdir()
    path.write_bytes(PDF)
    with any_env.client() as client:
        job = client.submit(path, label="invoices-2026")
        other = client.submit(PDF, label="contracts")
        assert (job.label, job.filename) == ("invoices-2026", "Q3 invoice.pdf")
        assert client.get(job.id).raw["label"] == "invoices-2026"
        assert [j.id for j in client.list_jobs(label="invoices-2026").jobs] == [job.id]
        assert [j.id for j in client.list_jobs(filename="Q3 invoice.pdf").jobs] == [job.id]
        assert [j.id for j in client.list_jobs(label="contracts").jobs] == [other.id]
    with any_env.client(any_env.key(tenant="globex")) as stranger:
        assert stranger.list_jobs(label="invoices-2026").jobs == []  # scoped by the key's tenant
        assert stranger.list_jobs().jobs == []


def test_a_path_sent_as_filename_keeps_only_the_name(env: ApiEnv) -> None:
    key = env.key()
    response = httpx.post(f"{env.base_url}/v1/jobs", headers={"Authorization": f"Bearer {key}"},
                          files={"file": ("C:\\Users\\ann\\secret folder\\scan.pdf", PDF, "application/pdf")})
    assert response.status_code == 201 and response.json()["filename"] == "scan.pdf"


def test_list_pages_with_a_stable_cursor_under_inserts(any_env: ApiEnv) -> None:
    with any_env.client() as client:
        batch = client.submit_batch([PDF] * 7, label="paged")
        expected = sorted((i.job.id for i in batch.items if i.job), reverse=True)
        first = client.list_jobs(label="paged", limit=3)
        client.submit(PDF, label="paged")  # a newer job never shifts the pages already being read
        rest = list(client.iter_jobs(label="paged", limit=3, cursor=first.next_cursor))
        assert [j.id for j in first.jobs] + [j.id for j in rest] == expected
        assert len({j.id for j in rest}) == len(rest)
        with pytest.raises(InvalidRequest) as bad:
            client.list_jobs(cursor="not-a-cursor")
        assert bad.value.field == "cursor"


def test_list_filters_by_state_mode_class_and_creation_range(any_env: ApiEnv) -> None:
    with any_env.client() as client:
        vector = client.submit(PDF, label="f")
        raster = client.submit(PDF, label="f", mode="raster")
        any_env.finish(vector.id)
        assert [j.id for j in client.list_jobs(label="f", state="succeeded").jobs] == [vector.id]
        assert [j.id for j in client.list_jobs(label="f", mode="raster").jobs] == [raster.id]
        assert len(client.list_jobs(label="f", document_class="default").jobs) == 2
        created = any_env.store.get(raster.id).created_at
        after = client.list_jobs(label="f", created_after=created).jobs
        assert raster.id in [j.id for j in after]
        before = client.list_jobs(label="f", created_before=created - timedelta(days=1)).jobs
        assert before == []
    key = any_env.key()
    naive = httpx.get(f"{any_env.base_url}/v1/jobs", params={"created_after": "2026-01-01T00:00:00"},
                      headers={"Authorization": f"Bearer {key}"})
    assert naive.status_code == 422 and naive.json()["error"]["field"] == "created_after"


def test_batch_commits_every_item_with_its_own_options(any_env: ApiEnv) -> None:
    with any_env.client() as client:
        batch = client.submit_batch(
            [("a.pdf", PDF), ("b.pdf", PDF), ("c.pdf", PDF)], label="batch",
            items=[{"idempotency_key": "a-1"}, {"mode": "raster", "label": "special"}, {}])
        assert (batch.created, batch.existing, batch.refused) == (3, 0, 0)
        a, b, c = (item.job for item in batch.items)
        assert a and b and c
        assert [i.filename for i in batch.items] == ["a.pdf", "b.pdf", "c.pdf"]
        assert (a.label, b.label, c.label) == ("batch", "special", "batch")
        assert b.mode == "raster" and a.mode == "vector"
        assert any_env.store.get(a.id).idempotency_key == "a-1"
        again = client.submit_batch([("a.pdf", PDF)], label="batch", items=[{"idempotency_key": "a-1"}])
        assert again.items[0].status == "existing" and again.items[0].job.id == a.id  # type: ignore[union-attr]
    assert len([p for p in _inputs(any_env) if p.name == "input.pdf"]) == 3  # the replay kept no bytes


def test_batch_is_refused_whole_by_one_bad_item_and_stores_nothing(any_env: ApiEnv) -> None:
    with any_env.client() as client:
        with pytest.raises(UnsupportedMediaType) as refused:
            client.submit_batch([PDF, NOT_PDF, PDF])
        assert refused.value.field == "items[1].file" and "refused whole" in refused.value.message
        with pytest.raises(InvalidRequest) as bad_option:
            client.submit_batch([PDF, PDF], items=[{}, {"deadline_s": 10**9}])
        assert bad_option.value.field == "items[1].deadline_s"
        with pytest.raises(InvalidRequest) as unknown:
            client.submit_batch([PDF], items=[{"colour": "red"}])
        assert unknown.value.field == "items[0].colour"
        client.submit(PDF, idempotency_key="taken")
        with pytest.raises(Conflict) as conflict:
            client.submit_batch([PDF, b"%PDF-1.4 different\n"], items=[{}, {"idempotency_key": "taken"}])
        assert conflict.value.field == "items[1].idempotency_key"
        assert len(client.list_jobs().jobs) == 1  # none of the refused batches left a job
    assert len([p for p in _inputs(any_env) if p.name == "input.pdf"]) == 1  # nor any stored byte


def test_partial_batch_accepts_the_valid_items(any_env: ApiEnv) -> None:
    with any_env.client() as client:
        client.submit(PDF, idempotency_key="taken")
        batch = client.submit_batch(
            [("ok.pdf", PDF), ("zip.pdf", NOT_PDF), ("empty.pdf", b""), ("clash.pdf", b"%PDF-1.4 other\n")],
            items=[{}, {}, {}, {"idempotency_key": "taken"}], partial=True)
        assert [i.status for i in batch.items] == ["created", "refused", "refused", "refused"]
        assert [i.error_code for i in batch.items] == [None, "unsupported_media_type", "empty_upload",
                                                       "idempotency_conflict"]
        assert (batch.created, batch.refused) == (1, 3)
        assert len(client.list_jobs().jobs) == 2
    assert len([p for p in _inputs(any_env) if p.name == "input.pdf"]) == 2


def test_batch_size_is_bounded(env: ApiEnv) -> None:
    with env.client() as client, pytest.raises(InvalidRequest) as too_many:
        client.submit_batch([PDF] * 201)
    assert "1-200" in too_many.value.message


def test_post_wait_answers_202_while_the_job_runs(any_env: ApiEnv) -> None:
    with any_env.client() as client:
        job = client.submit(PDF, wait_s=0.2)
    assert job.state == "queued" and not job.terminal
    key = any_env.key()
    raw = httpx.post(f"{any_env.base_url}/v1/jobs", params={"wait": "0.2"}, files={"file": ("x.pdf", PDF)},
                     headers={"Authorization": f"Bearer {key}"})
    assert raw.status_code == 202 and raw.headers["location"] == f"/v1/jobs/{raw.json()['id']}"


def test_post_wait_with_a_submit_only_key_answers_with_its_job(any_env: ApiEnv) -> None:
    """A key that may submit but not read still gets the job it created (never 403 after creating it,
    which would leave the caller without the job id and invite a duplicate submission)."""
    key = any_env.key("a", ("submit",))
    raw = httpx.post(f"{any_env.base_url}/v1/jobs", params={"wait": "0.2"}, files={"file": ("x.pdf", PDF)},
                     headers={"Authorization": f"Bearer {key}"})
    assert raw.status_code == 202, raw.text
    assert any_env.store.get(raw.json()["id"]).tenant == "a"
    auth = {"Authorization": f"Bearer {key}"}
    other = httpx.get(f"{any_env.base_url}/v1/jobs/{raw.json()['id']}", headers=auth)
    assert other.status_code == 403  # reading jobs stays the read scope's


@pytest.fixture
def worker_thread(any_env: ApiEnv) -> Iterator[threading.Event]:
    """Plays a worker woken by the submission (the store's wake-up, no polling): the first job queued
    after it started is claimed and committed."""
    stop = threading.Event()
    ready = threading.Event()

    def work() -> None:
        any_env.store.wait_for_work(0.0)  # listening from here on
        ready.set()
        while not stop.is_set():
            queued = any_env.store.list_jobs(state=JobState.QUEUED, limit=1)
            if queued:
                any_env.finish(queued[0].id)
                return
            any_env.store.wait_for_work(5.0, stop=stop)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    ready.wait(30)
    yield stop
    stop.set()
    thread.join(30)


def test_post_wait_answers_with_the_finished_job(any_env: ApiEnv, worker_thread: threading.Event) -> None:
    key = any_env.key()
    raw = httpx.post(f"{any_env.base_url}/v1/jobs", params={"wait": "20"}, files={"file": ("x.pdf", PDF)},
                     headers={"Authorization": f"Bearer {key}", "Idempotency-Key": "sync-1"}, timeout=60)
    assert raw.status_code == 201 and raw.json()["state"] == "succeeded" and raw.json()["artifact"]
    replay = httpx.post(f"{any_env.base_url}/v1/jobs", params={"wait": "20"}, files={"file": ("x.pdf", PDF)},
                        headers={"Authorization": f"Bearer {key}", "Idempotency-Key": "sync-1"}, timeout=60)
    assert replay.status_code == 200 and replay.json()["id"] == raw.json()["id"]


def test_labels_are_checked(env: ApiEnv) -> None:
    with env.client() as client, pytest.raises(InvalidRequest) as bad:
        client.submit(PDF, label="two\nlines")
    assert bad.value.field == "label"


def test_list_is_bounded(env: ApiEnv) -> None:
    key = env.key()
    response = httpx.get(f"{env.base_url}/v1/jobs", params={"limit": "201"},
                         headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 422
