"""The environment read for the command-line client, for test and benchmark databases, and for the
processes docfence starts (a sandbox zygote must not inherit credentials)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ClientSettings:
    """The command-line client's settings: where the API is and which key to present."""

    url: str = "http://127.0.0.1:8080"
    api_key: str = ""


def load_client_settings(env: dict[str, str] | None = None) -> ClientSettings:
    env = dict(os.environ if env is None else env)
    return ClientSettings(url=env.get("DOCFENCE_URL") or ClientSettings.url,
                          api_key=env.get("DOCFENCE_API_KEY", ""))


def admin_database_url(env: dict[str, str] | None = None) -> str:
    """A PostgreSQL URL allowed to create databases (benchmarks and tests make throwaway ones)."""
    env = dict(os.environ if env is None else env)
    return env.get("DOCFENCE_TEST_PG_URL") or "postgresql://postgres@127.0.0.1:5432/postgres"


def environment() -> dict[str, str]:
    """A copy of the process environment, for settings that name variables (e.g. provider keys)."""
    return dict(os.environ)


#: The variables a zygote, and so every render process (a fork of it, which can read its own
#: /proc/self/environ), inherits: what the interpreter, the engines and the sandbox's own hooks read.
#: Everything else stays behind, whatever its name: credentials (DOCFENCE_*, AWS_*, a provider's
#: `auth_env` such as RENDERCO_AUTH), database and storage URLs, the worker's settings.
INHERITED = frozenset({
    "PATH",  # the second reader runs pdfinfo and qpdf by name
    "HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_DATA_DIRS",  # fontconfig's
    # cache and configuration (and confine.python_roots lets a render process read HOME's font cache)
    "FONTCONFIG_FILE", "FONTCONFIG_PATH", "FONTCONFIG_SYSROOT",  # WeasyPrint's fonts, through Pango
    "LANG", "LANGUAGE", "TZ", "TZDIR",  # text encoding, messages and local time (LC_* below)
    "TMPDIR",  # the zygote's base for its render processes' private folders (each then sets its own)
    "GLIBC_TUNABLES",  # malloc's tuning, see with_huge_page_malloc
    "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME",  # what the interpreter may need to start at all
    "PYTHONUTF8", "PYTHONIOENCODING", "PYTHONDONTWRITEBYTECODE",
    "DOCFENCE_CONFIG", "DOCFENCE_DEFAULT_CLASS",  # the warm-up's classes (zygote._warm_marks): a path
    # and a name; the file itself is out of a render process's reach (Landlock)
    "DOCFENCE_FAULTS", "DOCFENCE_FAULTS_DIR",  # the fault hook (docfence.faults), inert unless set
    "DOCFENCE_ZYGOTE_TRACE", "DOCFENCE_ZYGOTE_TERM_AT",  # the zygote's test hook (sandbox.stopping)
})
INHERITED_PREFIXES = ("LC_",)  # the locale's categories (LC_ALL, LC_CTYPE, ...)


def sandbox_environment(source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a sandbox zygote: the INHERITED variables of `source` (this process's
    environment by default) and nothing else, glibc's malloc asked for transparent huge pages."""
    env = os.environ if source is None else source
    kept = {name: value for name, value in env.items()
            if name in INHERITED or name.startswith(INHERITED_PREFIXES)}
    return with_huge_page_malloc(kept)


_HUGETLB = "glibc.malloc.hugetlb"


def with_huge_page_malloc(env: dict[str, str]) -> dict[str, str]:
    """`env` with glibc.malloc.hugetlb=1 added to GLIBC_TUNABLES: malloc then advises the kernel to back
    its heap and its large blocks (2 MB and more) with transparent huge pages where the kernel's THP
    mode is "madvise" (no effect under "never"; "always" does it anyway). A render process is a fresh
    fork that touches every buffer for the first time: a 5 MB document read, signed and written took
    ~4,700 page faults at 4 KiB, ~3,150 this way (sign task CPU 41 -> 30 ms). A value the operator set
    in GLIBC_TUNABLES (glibc.malloc.hugetlb=0 turns it off) is kept as it is."""
    tunables = env.get("GLIBC_TUNABLES", "").strip(":")
    if any(item.split("=", 1)[0] == _HUGETLB for item in tunables.split(":") if item):
        return env
    return {**env, "GLIBC_TUNABLES": f"{tunables}:{_HUGETLB}=1" if tunables else f"{_HUGETLB}=1"}
