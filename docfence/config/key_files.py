"""The start-up check of key files' modes: a key that group or others may read (or write) is refused
with one line naming the file, its mode and the fix, before any long-running command starts."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from docfence.config.settings import Settings
from docfence.core.errors import ConfigError

#: The keys docfence keeps in a local data folder: the password-sealing key (blobs/sealed.KEY_FILE),
#: the secret that signs download URLs (service/base.load_signing_secret) and the local provider's
#: key-encryption keys (blobs/kek/local.KEK_FILE). All are made 0600.
DATA_FOLDER_KEYS = ("password.key", "signing.key", "kek.key")


def check_key_files(settings: Settings) -> None:
    """Each key file this deployment names or keeps is private to its owner (no group or other bits):
    the `[signing]` PKCS#12 and the data folder's keys. A missing file is not this check's to report
    (its loader names it). Raises ConfigError: "signing key /etc/docfence/signer.p12 ([signing]
    pkcs12) is readable or writable by group or others (mode 0644): chmod 600 it"."""
    for path, what in key_files(settings):
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)  # a symlink's target: what a reader gets
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ConfigError(f"{what.format(path=path)} cannot be checked ({exc.strerror})") from None
        if mode & 0o077:
            raise ConfigError(f"{what.format(path=path)} is readable or writable by group or others "
                              f"(mode {mode:04o}): chmod 600 it")


def key_files(settings: Settings) -> Iterator[tuple[Path, str]]:
    """(path, how a message names it: a format with {path}) of every key file `settings` name or keep."""
    if settings.signing.pkcs12:
        yield Path(settings.signing.pkcs12).absolute(), "signing key {path} ([signing] pkcs12)"
    if settings.encryption.kek_file:
        yield (Path(settings.encryption.kek_file).absolute(),
               "key-encryption key {path} ([encryption] kek_file)")
    folder = settings.data_folder()
    if folder is not None:
        for name in DATA_FOLDER_KEYS:
            yield (folder / name).absolute(), "data folder key {path}"
