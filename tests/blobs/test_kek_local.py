"""The `local` key provider: its key file is made once, whole and 0600, whatever the umask and however
many processes start together; a file others may read is refused; wrapped keys are bound to their
context; rotation keeps older keys for unwrapping and `rewrap` moves data keys to the current one."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from docfence.blobs.envelope import DataKey, open_bytes, seal_bytes
from docfence.blobs.kek import KeyProvider, KeyRing, WrappedKey, key_fingerprint, open_key_provider, rewrap
from docfence.blobs.kek.local import KEK_FILE, LocalKeyProvider, load_key_file, retire_key, rotate_key_file
from docfence.core.errors import BlobIntegrityError, ConfigError

JOB = {"tenant": "t1", "job": "job-1"}


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "data" / KEK_FILE


def test_the_key_file_is_made_once_whole_and_private_by_processes_starting_together(path: Path) -> None:
    start = threading.Barrier(8)
    ids: list[str] = []
    old_umask = os.umask(0)  # the most permissive umask: the file must still be 0600
    try:
        def make() -> None:
            start.wait()
            ids.append(LocalKeyProvider(path).current_key_id())

        threads = [threading.Thread(target=make) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        os.umask(old_umask)
    assert len(ids) == 8 and len(set(ids)) == 1
    assert sorted(p.name for p in path.parent.iterdir()) == [KEK_FILE]  # no temporary left
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_a_second_provider_reads_the_same_key(path: Path) -> None:
    key, wrapped = LocalKeyProvider(path).generate(JOB)
    assert LocalKeyProvider(path).unwrap(wrapped, JOB) == key


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o602])
def test_a_key_file_others_may_read_or_write_is_refused(path: Path, mode: int) -> None:
    LocalKeyProvider(path)
    path.chmod(mode)
    with pytest.raises(ConfigError, match=f"mode {mode:04o}.*chmod 600"):
        LocalKeyProvider(path)


def test_a_symlink_is_judged_by_its_target(path: Path, tmp_path: Path) -> None:
    LocalKeyProvider(path)
    link = tmp_path / "link.key"
    link.symlink_to(path)
    assert LocalKeyProvider(link).current_key_id() == LocalKeyProvider(path).current_key_id()
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="0644"):
        LocalKeyProvider(link)


NOT_KEYS = [b"", b"garbage-line-XYZ\n", b"kek-0000000000000000 " + b"A" * 43 + b"=\n"]


@pytest.mark.parametrize("content", NOT_KEYS)
def test_a_file_that_is_not_a_key_file_is_refused_without_echoing_it(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(ConfigError) as caught:
        LocalKeyProvider(path)
    if content:
        assert content.decode().strip() not in str(caught.value)


def test_an_unreadable_data_folder_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(ConfigError, match="cannot be created or read"):
        LocalKeyProvider(blocker / KEK_FILE)


def test_a_wrapped_key_opens_only_in_its_own_context(path: Path) -> None:
    provider = LocalKeyProvider(path)
    key, wrapped = provider.generate(JOB)
    assert isinstance(provider, KeyProvider)
    assert wrapped.provider == "local" and wrapped.key_id == provider.current_key_id()
    assert key.material not in wrapped.wrapped and key.material.hex() not in repr(wrapped)
    with pytest.raises(BlobIntegrityError, match="another job"):
        provider.unwrap(wrapped, {"tenant": "t1", "job": "job-2"})
    flipped = bytearray(wrapped.wrapped)
    flipped[-1] ^= 1
    with pytest.raises(BlobIntegrityError):
        provider.unwrap(WrappedKey("local", wrapped.key_id, bytes(flipped)), JOB)
    with pytest.raises(BlobIntegrityError, match="malformed"):
        provider.unwrap(WrappedKey("local", wrapped.key_id, wrapped.wrapped[:-1]), JOB)


def test_another_installations_key_file_cannot_unwrap(path: Path, tmp_path: Path) -> None:
    _key, wrapped = LocalKeyProvider(path).generate(JOB)
    other = LocalKeyProvider(tmp_path / "other" / KEK_FILE)
    with pytest.raises(ConfigError, match="restore the key file"):
        other.unwrap(wrapped, JOB)


def test_rotation_wraps_with_the_new_key_and_still_unwraps_the_old(path: Path) -> None:
    before = LocalKeyProvider(path)
    key, old = before.generate(JOB)
    sealed = seal_bytes(b"the job's input", key, "jobs/t1/job-1/input.pdf")
    new_id = rotate_key_file(path)
    assert new_id != old.key_id and list(load_key_file(path, create=False)) == [old.key_id, new_id]
    assert path.stat().st_mode & 0o777 == 0o600
    after = LocalKeyProvider(path)
    assert after.current_key_id() == new_id
    moved = rewrap(after, old, JOB)
    assert moved is not None and moved.key_id == new_id and moved.fingerprint() != old.fingerprint()
    assert rewrap(after, moved, JOB) is None  # already current: nothing to do
    assert open_bytes(sealed, after.unwrap(moved, JOB), "jobs/t1/job-1/input.pdf") == b"the job's input"
    assert before.unwrap(moved, JOB) == key  # a process started before the rotation reads the file again
    assert before.current_key_id() == new_id and before.wrap(key, JOB).key_id == new_id


def test_a_running_provider_wraps_with_the_rotated_key_at_once(path: Path) -> None:
    running = LocalKeyProvider(path)
    new_id = rotate_key_file(path)
    assert running.generate(JOB)[1].key_id == new_id


def test_a_retired_key_no_longer_opens_what_it_wrapped(path: Path) -> None:
    provider = LocalKeyProvider(path)
    _key, old = provider.generate(JOB)
    new_id = rotate_key_file(path)
    with pytest.raises(ConfigError, match="current key-encryption key"):
        retire_key(path, new_id)
    retire_key(path, old.key_id)
    retire_key(path, old.key_id)  # already retired: nothing to do
    assert list(load_key_file(path, create=False)) == [new_id]
    assert path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(ConfigError, match="restore the key file"):
        LocalKeyProvider(path).unwrap(old, JOB)


def test_concurrent_rotations_keep_every_new_key(path: Path) -> None:
    first = LocalKeyProvider(path).current_key_id()
    start = threading.Barrier(6)
    made: list[str] = []

    def rotate() -> None:
        start.wait()
        made.append(rotate_key_file(path))

    threads = [threading.Thread(target=rotate) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kept = list(load_key_file(path, create=False))
    assert len(made) == 6 and kept[0] == first and sorted(kept[1:]) == sorted(made)


def test_a_key_ring_refuses_unknown_and_duplicate_providers(path: Path, tmp_path: Path) -> None:
    provider = LocalKeyProvider(path)
    with pytest.raises(ConfigError, match="not configured"):
        KeyRing(provider).unwrap(WrappedKey("vault-transit", "k", b"x"), JOB)
    with pytest.raises(ConfigError, match="one provider of each name"):
        KeyRing(provider, LocalKeyProvider(tmp_path / "other" / KEK_FILE))


def test_fingerprints_name_keys_without_their_ids() -> None:
    one = key_fingerprint("aws-kms", "arn:aws:kms:eu-central-1:123456789012:key/abc")
    assert len(one) == 32 and "123456789012" not in one
    assert one != key_fingerprint("aws-kms", "arn:aws:kms:eu-central-1:123456789012:key/abd")
    assert key_fingerprint("local", "kek-1") != key_fingerprint("aws-kms", "kek-1")


def test_data_keys_are_fresh() -> None:
    assert len({DataKey.generate().material for _ in range(100)}) == 100


def test_the_factory_keeps_the_local_key_in_the_data_folder_or_the_named_file(tmp_path: Path) -> None:
    in_folder = open_key_provider("local", data_folder=tmp_path / "data")
    assert isinstance(in_folder, LocalKeyProvider) and in_folder.path == tmp_path / "data" / KEK_FILE
    named = open_key_provider("local", data_folder=None, kek_file=str(tmp_path / "secrets" / "kek"))
    assert isinstance(named, LocalKeyProvider)
    assert (tmp_path / "secrets" / "kek").stat().st_mode & 0o777 == 0o600
    with pytest.raises(ConfigError, match="needs kek_file") as caught:
        open_key_provider("local", data_folder=None)
    assert caught.value.field == "encryption.kek_file"
    with pytest.raises(ConfigError, match="needs kms_key_id"):
        open_key_provider("aws-kms", data_folder=tmp_path)
    with pytest.raises(ConfigError, match="allowed: local, aws-kms"):
        open_key_provider("vault", data_folder=tmp_path)
