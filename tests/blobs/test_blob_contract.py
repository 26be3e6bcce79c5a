"""Runs the BlobStore conformance suite against a local folder and a real moto S3 server (a subprocess, never
an in-process mock), plus the backend-specific guarantees: temp files, symlinks, multipart, URLs, regions."""

from __future__ import annotations

import io
import os
import stat
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from docfence.blobs import LocalBlobStore, RegionRouter, open_blob_store
from docfence.blobs.s3 import MIN_PART_SIZE, S3BlobStore
from docfence.core.clock import FakeClock
from docfence.core.errors import BlobError, BlobIntegrityError, BlobNotFound, ConfigError, RegionNotApproved
from docfence.testing.blob_contract import ALL_BYTES, BlobHarness, BlobStoreContract, run_moto_server
from docfence.testing.s3_env import use_dummy_aws

REGION = "eu-central-1"
BUCKET = "docfence-test"


# -- fixtures ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A real moto server; dummy credentials are set for the session and the host's AWS config is hidden."""
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_aws(mp)
        with run_moto_server() as endpoint:
            _raw_client(endpoint).create_bucket(
                Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION}
            )
            yield endpoint


@pytest.fixture(scope="session")
def s3_client(moto_endpoint: str) -> Any:
    """One raw client for the session: building a boto3 client costs ~0.2 s."""
    return _raw_client(moto_endpoint)


@pytest.fixture(params=["local", "s3"])
def blob_harness(request: pytest.FixtureRequest, tmp_path: Path) -> BlobHarness:
    if request.param == "local":
        return _local_harness(LocalBlobStore(tmp_path / "blobs"))
    return _s3_harness(request.getfixturevalue("s3_client"))


def _raw_client(endpoint: str, **config: Any) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        config=Config(s3={"addressing_style": "path"}, **config),
    )


def _flip_first_byte(data: bytes) -> bytes:
    return bytes([data[0] ^ 0xFF]) + data[1:]


def _local_harness(store: LocalBlobStore) -> BlobHarness:
    def corrupt(key: str) -> None:
        path = store.root / key
        path.write_bytes(_flip_first_byte(path.read_bytes()))

    def leftovers() -> list[str]:
        found = []
        for dirpath, dirs, files in os.walk(store.root):
            rel = os.path.relpath(dirpath, store.root)
            found += [os.path.join(rel, name) for name in files if name.startswith(".")]
            if not dirs and not files and dirpath != str(store.root):
                found.append(rel + "/")  # an empty folder still leaks a key's name
        return found

    return BlobHarness(store, corrupt, leftovers)


def _s3_harness(raw: Any) -> BlobHarness:
    prefix = f"t{uuid.uuid4().hex[:12]}/"  # one bucket, a fresh folder per test: also tests the prefix
    store = S3BlobStore(BUCKET, prefix, client=raw)

    def corrupt(key: str) -> None:
        answer = raw.get_object(Bucket=BUCKET, Key=prefix + key)
        body = _flip_first_byte(answer["Body"].read())
        raw.put_object(Bucket=BUCKET, Key=prefix + key, Body=body, Metadata=answer["Metadata"])

    def leftovers() -> list[str]:
        return _unfinished_uploads(raw, prefix)

    return BlobHarness(store, corrupt, leftovers)


def _unfinished_uploads(raw: Any, prefix: str) -> list[str]:
    uploads = raw.list_multipart_uploads(Bucket=BUCKET, Prefix=prefix).get("Uploads", [])
    return [f"upload:{u['Key']}" for u in uploads]


class TestBlobContract(BlobStoreContract):
    """The shared suite, once per backend."""


# -- local folder ------------------------------------------------------------------------------------------


def test_local_temp_files_are_never_listed_and_stale_ones_are_removed(tmp_path: Path) -> None:
    written_at = datetime(2026, 3, 1, tzinfo=UTC).timestamp()
    store = LocalBlobStore(tmp_path, clock=FakeClock(datetime.fromtimestamp(written_at + 3600, UTC)))
    store.put("a/b", b"x")
    crash_debris = tmp_path / "a" / ".tmp-crashed"
    crash_debris.write_bytes(b"half an object")
    os.utime(crash_debris, (written_at, written_at))
    assert list(store.list()) == ["a/b"]
    assert store.list_stale_temp(older_than_s=7200) == []
    assert store.list_stale_temp(older_than_s=600) == ["a/.tmp-crashed"]
    assert store.remove_stale_temp(older_than_s=600) == 1
    assert not crash_debris.exists()
    assert store.get("a/b") == b"x"


def test_local_objects_are_private(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    store.put("t1/job-1/out.pdf", b"%PDF")
    assert stat.S_IMODE((store.root / "t1/job-1/out.pdf").stat().st_mode) == 0o600
    assert stat.S_IMODE((store.root / "t1").stat().st_mode) & 0o077 == 0


def test_local_symlink_cannot_escape_the_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    store = LocalBlobStore(tmp_path / "blobs")
    (store.root / "link").symlink_to(outside)
    with pytest.raises(ConfigError):
        store.put("link/x", b"secret")
    with pytest.raises(ConfigError):
        store.get("link/x")
    assert list(outside.iterdir()) == []


def test_local_key_cannot_be_both_object_and_folder(tmp_path: Path) -> None:
    harness = _local_harness(LocalBlobStore(tmp_path))
    harness.store.put("a", b"1")
    harness.store.put("c/d", b"2")
    with pytest.raises(BlobError):
        harness.store.put("a/b", b"x")
    with pytest.raises(BlobError):
        harness.store.put("c", b"x")
    assert list(harness.store.list()) == ["a", "c/d"]
    assert harness.leftovers() == []


def test_local_concurrent_puts_and_deletes_in_one_folder(tmp_path: Path) -> None:
    """Deleting the last object prunes its folder; a concurrent put into that folder must still succeed."""
    store = LocalBlobStore(tmp_path)
    errors: list[BaseException] = []

    def churn(worker: int) -> None:
        try:
            for i in range(150):
                key = f"shared/deep/w{worker}-{i}"
                store.put(key, b"x")
                assert store.delete(key)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert list(store.list()) == []
    assert _local_harness(store).leftovers() == []


def test_local_root_must_be_a_folder(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(ConfigError):
        LocalBlobStore(tmp_path / "file")
    with pytest.raises(ConfigError):
        LocalBlobStore(Path("/"))


# -- S3 ----------------------------------------------------------------------------------------------------


def test_s3_multipart_stream_round_trip(moto_endpoint: str, s3_client: Any) -> None:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    store = S3BlobStore(BUCKET, prefix, endpoint_url=moto_endpoint, part_size=MIN_PART_SIZE)
    data = os.urandom(MIN_PART_SIZE * 2 + 123)  # three parts
    info = store.put_stream("big/obj", io.BytesIO(data), max_bytes=len(data))
    assert store.get("big/obj", expected_sha256=info.sha256) == data
    assert store.stat("big/obj") == info
    assert _unfinished_uploads(s3_client, prefix) == []


class _FailingComplete:
    """A boto3 client whose CompleteMultipartUpload fails, as a dropped connection would."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def complete_multipart_upload(self, **_kwargs: Any) -> Any:
        raise ClientError({"Error": {"Code": "InternalError", "Message": "boom"}}, "CompleteMultipartUpload")


def test_s3_failed_multipart_upload_is_aborted(s3_client: Any) -> None:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    client = _FailingComplete(s3_client)
    store = S3BlobStore(BUCKET, prefix, client=client, part_size=MIN_PART_SIZE)
    data = os.urandom(MIN_PART_SIZE + 1)
    with pytest.raises(BlobError, match="InternalError"):
        store.put_stream("obj", io.BytesIO(data), max_bytes=len(data))
    assert not store.exists("obj")
    assert _unfinished_uploads(s3_client, prefix) == []


def test_s3_objects_are_private_encrypted_and_carry_their_sha256(moto_endpoint: str, s3_client: Any) -> None:
    store = S3BlobStore(
        BUCKET, "private", endpoint_url=moto_endpoint, region_name=REGION, server_side_encryption="AES256"
    )
    info = store.put("t1/out.pdf", b"%PDF-1.7")
    head = s3_client.head_object(Bucket=BUCKET, Key="private/t1/out.pdf")
    assert head["Metadata"] == {"sha256": info.sha256}
    assert head["ServerSideEncryption"] == "AES256"
    grants = s3_client.get_object_acl(Bucket=BUCKET, Key="private/t1/out.pdf")["Grants"]
    assert [g["Grantee"]["Type"] for g in grants] == ["CanonicalUser"]


def test_s3_verifies_the_recorded_sha256_even_without_an_expected_one(s3_client: Any) -> None:
    harness = _s3_harness(s3_client)
    harness.store.put("k", ALL_BYTES)
    harness.corrupt("k")
    with pytest.raises(BlobIntegrityError):
        harness.store.get("k")


def test_s3_errors_are_translated_by_code(moto_endpoint: str, s3_client: Any) -> None:
    no_bucket = S3BlobStore("no-such-bucket", endpoint_url=moto_endpoint, region_name=REGION)
    with pytest.raises(BlobError, match="NoSuchBucket") as caught:
        no_bucket.get("x")
    assert not isinstance(caught.value, BlobNotFound)  # a missing bucket must never read as "deleted"
    assert isinstance(caught.value.__cause__, ClientError)

    with pytest.raises(BlobNotFound) as missing:
        S3BlobStore(BUCKET, client=s3_client).get("never/written")
    assert isinstance(missing.value.__cause__, ClientError)

    port_nobody_listens_on = f"http://127.0.0.1:{_closed_port()}"
    client = _raw_client(port_nobody_listens_on, retries={"max_attempts": 1}, connect_timeout=1)
    with pytest.raises(BlobError, match="EndpointConnectionError"):
        S3BlobStore(BUCKET, client=client).put("x", b"x")


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- URLs and regions --------------------------------------------------------------------------------------


def test_open_blob_store_file_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absolute = open_blob_store(f"file://{tmp_path}/abs")
    assert isinstance(absolute, LocalBlobStore)
    assert absolute.root == tmp_path.resolve() / "abs"
    monkeypatch.chdir(tmp_path)
    relative = open_blob_store("file:rel/dir")
    assert isinstance(relative, LocalBlobStore)
    assert relative.root == tmp_path.resolve() / "rel/dir"
    monkeypatch.chdir("/")  # the root was fixed at construction
    relative.put("k", b"v")
    assert (tmp_path / "rel/dir/k").read_bytes() == b"v"


def test_open_blob_store_s3_url(moto_endpoint: str, s3_client: Any) -> None:
    store = open_blob_store(f"s3://{BUCKET}/via-url/?endpoint_url={moto_endpoint}&region={REGION}&sse=AES256")
    assert isinstance(store, S3BlobStore)
    assert store.prefix == "via-url/"
    info = store.put("k", b"v")
    assert store.get("k", expected_sha256=info.sha256) == b"v"
    assert s3_client.get_object(Bucket=BUCKET, Key="via-url/k")["Body"].read() == b"v"


@pytest.mark.parametrize(
    "url",
    [
        "", "/plain/path", "ftp://host/x", "file://host/x", "file:///tmp/x?y=1", "file:",
        "s3://", "s3://Bad_Bucket", "s3://user:secret@bucket", "s3://bucket:9000", "s3://bucket/../up",
        "s3://bucket/a//b", "s3://bucket?unknown=1", "s3://bucket?region=a&region=b", "s3://bucket?region=",
        "s3://bucket?endpoint_url=ftp://x", "s3://bucket?endpoint_url=http://u:p@host",
    ],
)  # fmt: skip
def test_open_blob_store_rejects_bad_urls(url: str) -> None:
    with pytest.raises(ConfigError):
        open_blob_store(url)


def test_region_router_from_config(tmp_path: Path) -> None:
    router = RegionRouter.from_config(
        {"eu-central-1": f"file://{tmp_path}/eu", "ch": f"file://{tmp_path}/ch"}
    )
    assert router.approved() == ["ch", "eu-central-1"]
    router.for_region("ch").put("k", b"swiss")
    assert (tmp_path / "ch/k").exists()
    assert not (tmp_path / "eu/k").exists()
    with pytest.raises(RegionNotApproved):
        router.for_region("us-east-1")
    for bad in ({"EU": f"file://{tmp_path}/x"}, {"eu": "ftp://x"}, {}):
        with pytest.raises(ConfigError):
            RegionRouter.from_config(bad)
