"""The `aws-kms` key provider: data keys from AWS KMS GenerateDataKey, wrapped with Encrypt and unwrapped
with Decrypt under one configured KMS key, bound to the job's encryption context (which CloudTrail
records). Every call is bounded as the object store's are (S3Timeouts); botocore errors are translated
here, by error code."""

from __future__ import annotations

import threading
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from docfence.blobs.envelope import DataKey
from docfence.blobs.kek.base import Context, WrappedKey, context_bytes
from docfence.blobs.s3 import S3Timeouts
from docfence.core.clock import Clock, SystemClock
from docfence.core.errors import BlobError, BlobIntegrityError, ConfigError, DocfenceError

NAME = "aws-kms"
RESOLVE_EVERY_S = 60.0  # how long the configured key's ARN is taken as current without asking again
#: Error codes that an operator must fix (the key is gone, disabled, not ours, not for encryption).
_CONFIG_CODES = frozenset({"NotFoundException", "DisabledException", "AccessDeniedException",
                           "KMSInvalidStateException", "InvalidKeyUsageException", "IncorrectKeyException",
                           "UnrecognizedClientException", "InvalidSignatureException", "ValidationException"})
#: The wrapped key does not open: corrupt, or bound to another context.
_CIPHERTEXT_CODES = frozenset({"InvalidCiphertextException"})


class AwsKmsProvider:
    """KeyProvider over one KMS key. `key_id` is what the configuration names (key id, ARN or
    alias/NAME); wrapped keys record the key's ARN, as KMS answers it, so re-pointing an alias to a new
    key is a rotation that `rewrap` can finish. KMS's own yearly rotation needs no rewrap at all."""

    name = NAME

    def __init__(self, key_id: str, *, region_name: str | None = None, endpoint_url: str | None = None,
                 timeouts: S3Timeouts | None = None, client: Any | None = None, clock: Clock | None = None,
                 resolve_every_s: float = RESOLVE_EVERY_S) -> None:
        if not key_id or len(key_id) > 2048:
            raise ConfigError("the aws-kms key provider needs a KMS key id, ARN or alias/NAME")
        self.key_id = key_id
        self.timeouts = timeouts or S3Timeouts()  # the same bounds as the object store's calls
        self._client = client or _make_client(endpoint_url, region_name, self.timeouts)
        self._clock = clock or SystemClock()
        self._resolve_every_s = resolve_every_s
        self._lock = threading.Lock()
        self._arn: tuple[str, float] | None = None  # (ARN, when it was asked: monotonic)

    def __repr__(self) -> str:
        return f"AwsKmsProvider(key_id={self.key_id!r})"

    def current_key_id(self) -> str:
        """The configured key's ARN (DescribeKey), asked again after `resolve_every_s`: an alias
        re-pointed to a new key is seen by a running rewrap pass within that time."""
        with self._lock:
            now = self._clock.monotonic()
            if self._arn is None or now - self._arn[1] >= self._resolve_every_s:
                answer = self._call("describe the key", self._client.describe_key, KeyId=self.key_id)
                self._arn = (str(answer["KeyMetadata"]["Arn"]), now)
            return self._arn[0]

    def generate(self, context: Context) -> tuple[DataKey, WrappedKey]:
        answer = self._call("generate a data key", self._client.generate_data_key, KeyId=self.key_id,
                            KeySpec="AES_256", EncryptionContext=_context(context))
        return DataKey(answer["Plaintext"]), WrappedKey(NAME, str(answer["KeyId"]), answer["CiphertextBlob"])

    def wrap(self, key: DataKey, context: Context) -> WrappedKey:
        answer = self._call("encrypt a data key", self._client.encrypt, KeyId=self.key_id,
                            Plaintext=key.material, EncryptionContext=_context(context))
        return WrappedKey(NAME, str(answer["KeyId"]), answer["CiphertextBlob"])

    def unwrap(self, wrapped: WrappedKey, context: Context) -> DataKey:
        """Decrypt, naming the key the wrapped form records: KMS refuses a blob of any other key."""
        if wrapped.provider != NAME:
            raise ConfigError(f"the aws-kms key provider cannot unwrap a key of provider "
                              f"{wrapped.provider!r}")
        answer = self._call("decrypt a data key", self._client.decrypt, KeyId=wrapped.key_id,
                            CiphertextBlob=wrapped.wrapped, EncryptionContext=_context(context))
        try:
            return DataKey(answer["Plaintext"])
        except ConfigError:
            raise BlobIntegrityError("KMS returned a data key of the wrong size") from None

    def _call(self, op: str, fn: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            answer: dict[str, Any] = fn(**kwargs)
        except ClientError as exc:
            raise _translate(exc, op) from exc
        except BotoCoreError as exc:  # connection refused, timeouts, missing credentials...
            raise BlobError(f"kms: cannot {op} ({type(exc).__name__})") from exc
        return answer


def _context(context: Context) -> dict[str, str]:
    context_bytes(context)  # the same check as every provider's: strings to strings
    return dict(context)


def _translate(exc: ClientError, op: str) -> DocfenceError:
    """By error code, never by message text; the message names the code, not the key's ARN."""
    code = str(exc.response.get("Error", {}).get("Code", ""))
    if code in _CIPHERTEXT_CODES:
        return BlobIntegrityError(f"kms: the wrapped data key does not open ({code}): corrupt, or bound "
                                  "to another job")
    if code in _CONFIG_CODES:
        return ConfigError(f"kms: cannot {op} ({code}): check the key id, its state and this identity's "
                           "permissions (kms:GenerateDataKey, kms:Encrypt, kms:Decrypt, kms:DescribeKey)")
    return BlobError(f"kms: cannot {op} ({code or 'no error code'})")  # throttling, KMS internal: retryable


def _make_client(endpoint_url: str | None, region_name: str | None, timeouts: S3Timeouts) -> Any:
    """Credentials come from the standard boto3 chain (env vars, config files, instance roles)."""
    config = Config(
        retries={"mode": "standard", "total_max_attempts": timeouts.max_attempts},
        connect_timeout=timeouts.connect_s,
        read_timeout=timeouts.read_s,
        tcp_keepalive=True,
    )
    return boto3.session.Session().client("kms", endpoint_url=endpoint_url, region_name=region_name,
                                          config=config)
