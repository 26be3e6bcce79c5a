"""The folder where the processes of one host (serve, worker, reconcile) share their counters, so one
scrape of any of them shows all: chosen from the settings, switched on before prometheus_client is
imported (no module-level import of it here, on purpose), dead processes' files folded at start."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from docfence.config import Settings
from docfence.core.errors import ConfigError
from docfence.core.process_id import alive, namespace

#: prometheus_client's own variable: it picks its multi-process value class when first imported.
ENV_VAR = "PROMETHEUS_MULTIPROC_DIR"
#: `<kind>_<pid>-<pid namespace>.db` (process_id.process_identifier); bare-pid files (older versions,
#: namespace unknown) are never folded: they may belong to a live process of another container.
_FILE = re.compile(r"(counter|histogram|summary|gauge_[a-z]+)_(\d+)-(\d+)\.db")
_SUMMED = ("counter", "histogram", "summary")  # what a dead process's files add to the totals
ARCHIVE = "archive"  # `counter_archive.db`: the folded totals (no pid: never folded itself)


def metrics_dir(settings: Settings) -> Path:
    """`metrics_dir` when set; else `metrics/` beside a SQLite database (the README's set-up: every
    process of the host already shares that folder); else a folder in the temp directory named after
    the database, so two deployments on one host never mix their counters."""
    if settings.metrics_dir:
        return Path(settings.metrics_dir)
    database = settings.sqlite_path()
    if database is not None:
        return database.parent / "metrics"
    digest = hashlib.sha256(settings.database_url.encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"docfence-metrics-{digest}"


def prepare_folder(settings: Settings) -> Path:
    """The metrics folder, created (0700) when missing. The default one in the temp directory, where
    any local user can plant a folder or symlink first, must be this user's own real directory with
    no group or other permissions; ConfigError otherwise."""
    folder = metrics_dir(settings)
    shared_tmp = not settings.metrics_dir and settings.sqlite_path() is None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=not shared_tmp)
    except FileExistsError:
        if not shared_tmp:
            raise
        # whatever is there is checked below, without following a symlink
    if shared_tmp:
        info = folder.lstat()
        if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid()
                or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO)):
            raise ConfigError(f"the default metrics folder {folder} is not a directory of this user closed "
                              "to group and others (planted by another user?); set DOCFENCE_METRICS_DIR "
                              "to a folder of your own", field="DOCFENCE_METRICS_DIR")
    return folder


def fold_dead(folder: Path) -> list[str]:
    """Fold the counters and histograms of processes of this pid namespace that no longer run (their
    pid and namespace are in the file name; another namespace's files are never folded) into one
    archive file per type, then delete their files, so totals survive restarts while the folder
    stays as small as the set of live processes. Dead gauges are dropped. One process folds at a
    time (a lock file). Returns the names folded. Import prometheus_client only after
    ENV_VAR is set: its first import fixes the value class of the whole process."""
    import fcntl

    from prometheus_client.mmap_dict import MmapedDict

    folded: list[str] = []
    archives: dict[str, Any] = {}
    with (folder / ".fold.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            for path in sorted(folder.glob("*.db")):
                match = _FILE.fullmatch(path.name)
                if not match or match.group(3) != namespace() or alive(int(match.group(2))):
                    continue  # another namespace's pid means nothing here: never folded
                kind = match.group(1)
                if kind in _SUMMED:
                    try:
                        entries = list(MmapedDict.read_all_values_from_file(str(path)))
                    except (OSError, RuntimeError):  # torn by a crash mid-write: its counts are lost
                        entries = []
                    archive = archives.get(kind) or archives.setdefault(
                        kind, MmapedDict(str(folder / f"{kind}_{ARCHIVE}.db")))
                    for key, value, stamp, _pos in entries:
                        archive.write_value(key, archive.read_value(key)[0] + value, stamp)
                path.unlink(missing_ok=True)
                folded.append(path.name)
        finally:
            for archive in archives.values():
                archive.close()
    return folded


def share(settings: Settings) -> Path | None:
    """Make this process write its counters into the host's shared folder: create it (0700), set
    ENV_VAR (inherited by the render processes this one starts), fold dead processes' files. Returns
    the folder, or None when prometheus_client was already imported (its choice is made once; the
    process then serves only its own counters). Call it first thing in `serve`, `worker`, `reconcile`."""
    if "prometheus_client" in sys.modules:
        return None
    folder = prepare_folder(settings)
    # The one environment write in docfence: prometheus_client reads only this variable, at import.
    os.environ[ENV_VAR] = str(folder)
    fold_dead(folder)
    return folder
