"""The `aws-kms` key provider against a real moto server on loopback (a subprocess speaking the KMS and S3
protocols over HTTP, never an in-process mock): data keys bound to their context, keys named by ARN,
rotation by re-pointing an alias, errors translated by code, a provider migration, and sealed objects
in S3 (multipart) that hold no plaintext."""

from __future__ import annotations

import hashlib
import io
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from docfence.blobs.envelope import DataKey, SealingReader, open_bytes, open_chunks, seal_bytes, sealed_size
from docfence.blobs.kek import KeyProvider, KeyRing, WrappedKey, open_key_provider, rewrap
from docfence.blobs.kek.aws_kms import AwsKmsProvider, _translate
from docfence.blobs.kek.local import KEK_FILE, LocalKeyProvider
from docfence.blobs.s3 import MIN_PART_SIZE, S3BlobStore, S3Timeouts
from docfence.core.clock import FakeClock
from docfence.core.errors import BlobError, BlobIntegrityError, ConfigError
from docfence.testing.blob_contract import run_moto_server
from docfence.testing.s3_env import use_dummy_aws

REGION = "eu-central-1"
BUCKET = "docfence-sealed"
JOB = {"tenant": "t1", "job": "job-1"}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_aws(mp)
        with run_moto_server() as url:
            yield url


@pytest.fixture(scope="module")
def kms(endpoint: str) -> Any:
    return boto3.client("kms", endpoint_url=endpoint, region_name=REGION)


@pytest.fixture
def alias(kms: Any) -> str:
    """A new key behind a new alias, per test."""
    name = f"alias/docfence-{os.urandom(4).hex()}"
    kms.create_alias(AliasName=name, TargetKeyId=kms.create_key()["KeyMetadata"]["KeyId"])
    return name


def _provider(endpoint: str, key_id: str) -> AwsKmsProvider:
    provider = open_key_provider("aws-kms", data_folder=None, kms_key_id=key_id, kms_region=REGION,
                                 kms_endpoint_url=endpoint)
    assert isinstance(provider, AwsKmsProvider)
    return provider


def test_a_data_key_from_kms_opens_only_in_its_context(endpoint: str, kms: Any, alias: str) -> None:
    provider = _provider(endpoint, alias)
    assert isinstance(provider, KeyProvider)
    key, wrapped = provider.generate(JOB)
    arn = kms.describe_key(KeyId=alias)["KeyMetadata"]["Arn"]
    assert wrapped.provider == "aws-kms" and wrapped.key_id == arn == provider.current_key_id()
    assert key.material not in wrapped.wrapped
    assert _provider(endpoint, alias).unwrap(wrapped, JOB) == key
    with pytest.raises(BlobIntegrityError, match="InvalidCiphertextException"):
        provider.unwrap(wrapped, {"tenant": "t1", "job": "job-2"})


def test_wrap_and_unwrap_a_local_data_key(endpoint: str, alias: str) -> None:
    provider = _provider(endpoint, alias)
    data_key = DataKey.generate()
    wrapped = provider.wrap(data_key, JOB)
    assert wrapped.key_id == provider.current_key_id() and data_key.material not in wrapped.wrapped
    assert provider.unwrap(wrapped, JOB) == data_key


def test_rotation_by_repointing_the_alias_is_finished_by_rewrap(endpoint: str, kms: Any, alias: str) -> None:
    before = _provider(endpoint, alias)
    key, old = before.generate(JOB)
    sealed = seal_bytes(b"input bytes", key, "jobs/t1/job-1/input.pdf")
    kms.update_alias(AliasName=alias, TargetKeyId=kms.create_key()["KeyMetadata"]["KeyId"])
    after = _provider(endpoint, alias)
    assert after.current_key_id() != old.key_id
    moved = rewrap(after, old, JOB)
    assert moved is not None and moved.key_id == after.current_key_id()
    assert rewrap(after, moved, JOB) is None
    assert open_bytes(sealed, after.unwrap(moved, JOB), "jobs/t1/job-1/input.pdf") == b"input bytes"
    assert after.unwrap(old, JOB) == key  # the old key still decrypts what it wrapped until retired


def test_a_running_provider_sees_the_repointed_alias_after_its_resolve_interval(
        endpoint: str, kms: Any, alias: str) -> None:
    clock = FakeClock()
    provider = AwsKmsProvider(alias, region_name=REGION, endpoint_url=endpoint, clock=clock,
                              resolve_every_s=60.0)
    first = provider.current_key_id()
    kms.update_alias(AliasName=alias, TargetKeyId=kms.create_key()["KeyMetadata"]["KeyId"])
    _key, wrapped = provider.generate(JOB)
    assert wrapped.key_id != first  # KMS itself follows the alias at once
    assert provider.current_key_id() == first  # within the interval: not asked again
    clock.advance(60.0)
    assert provider.current_key_id() == wrapped.key_id
    assert rewrap(provider, wrapped, JOB) is None


def test_a_wrapped_key_names_its_kms_key(endpoint: str, kms: Any, alias: str) -> None:
    provider = _provider(endpoint, alias)
    _key, wrapped = provider.generate(JOB)
    other = kms.create_key()["KeyMetadata"]["Arn"]
    with pytest.raises(ConfigError, match="AccessDeniedException"):
        provider.unwrap(WrappedKey("aws-kms", other, wrapped.wrapped), JOB)


def test_a_missing_key_is_a_config_error(endpoint: str) -> None:
    with pytest.raises(ConfigError, match="NotFoundException"):
        _provider(endpoint, "alias/docfence-does-not-exist").generate(JOB)
    with pytest.raises(ConfigError, match="NotFoundException"):
        _provider(endpoint, "alias/docfence-does-not-exist").current_key_id()


@pytest.mark.parametrize(("code", "error", "retryable"), [
    ("DisabledException", ConfigError, False), ("KMSInvalidStateException", ConfigError, False),
    ("InvalidCiphertextException", BlobIntegrityError, False), ("ThrottlingException", BlobError, True),
    ("KMSInternalException", BlobError, True), ("KeyUnavailableException", BlobError, True),
])
def test_error_codes_moto_cannot_produce_are_translated_by_code(code: str, error: type[Exception],
                                                                retryable: bool) -> None:
    """moto does not refuse a disabled key or throttle: the table is checked on botocore's own error."""
    answer = _translate(ClientError({"Error": {"Code": code, "Message": "arn:aws:kms:secret"}}, "Decrypt"),
                        "decrypt a data key")
    assert type(answer) is error and code in str(answer) and "arn:" not in str(answer)
    assert answer.retryable is retryable


def test_an_unreachable_kms_is_a_retryable_error_within_bounds() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = AwsKmsProvider("alias/x", region_name=REGION, endpoint_url=f"http://127.0.0.1:{port}",
                              timeouts=S3Timeouts(connect_s=1.0, read_s=1.0, max_attempts=1))
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_aws(mp)
        with pytest.raises(BlobError) as caught:
            provider.generate(JOB)
    assert caught.value.retryable and "EndpointConnectionError" in str(caught.value)


def test_moving_from_the_local_provider_to_kms(endpoint: str, alias: str, tmp_path: Path) -> None:
    local = LocalKeyProvider(tmp_path / KEK_FILE)
    key, wrapped = local.generate(JOB)
    ring = KeyRing(_provider(endpoint, alias), local)
    moved = rewrap(ring, wrapped, JOB)
    assert moved is not None and moved.provider == "aws-kms"
    assert ring.unwrap(moved, JOB) == ring.unwrap(wrapped, JOB) == key
    assert rewrap(ring, moved, JOB) is None


def test_a_sealed_object_in_s3_holds_no_plaintext(endpoint: str, alias: str) -> None:
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    store = S3BlobStore(BUCKET, "objects", endpoint_url=endpoint, region_name=REGION)
    key, _wrapped = _provider(endpoint, alias).generate(JOB)
    data = (b"%PDF-1.7\n" + b"Patient Jane Example\n" * 4000) * 80  # ~6.7 MB: a multipart upload
    assert len(data) > MIN_PART_SIZE + 1024 * 1024
    object_id = "jobs/t1/job-1/attempts/1/output.pdf"
    reader = SealingReader(io.BytesIO(data), key, object_id, max_bytes=len(data))
    stored = store.put_stream(object_id, reader, max_bytes=sealed_size(len(data)))
    raw = s3.get_object(Bucket=BUCKET, Key=f"objects/{object_id}")["Body"].read()
    assert b"%PDF" not in raw and b"Jane Example" not in raw and len(raw) == stored.bytes
    with store.open_read(object_id, expected_sha256=stored.sha256) as blob:
        plain = b"".join(open_chunks(blob, key, object_id, expected_sha256=reader.info.plaintext_sha256))
    assert hashlib.sha256(plain).hexdigest() == hashlib.sha256(data).hexdigest()
