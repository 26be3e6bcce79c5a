"""The environment read for the command-line client, for test and benchmark databases, and for the
processes docfence starts (a sandbox zygote must not inherit credentials)."""

from __future__ import annotations

import os
import re
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


# variables a sandbox zygote (and so every render process) must not inherit: credentials by name
_SECRET_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSW|CREDENTIAL|DATABASE_URL|STORAGE_URL", re.IGNORECASE)


def sandbox_environment() -> dict[str, str]:
    """The environment for a sandbox zygote: this process's, minus every variable whose name marks a
    credential (DOCFENCE_PASSWORD_KEY, DOCFENCE_SIGNING_SECRET, DOCFENCE_SIGNING_PKCS12_PASSWORD,
    DOCFENCE_DATABASE_URL, AWS_SECRET_ACCESS_KEY, provider keys...): a render process that a hostile
    document took over reads its own environment first. glibc's malloc is asked for transparent huge
    pages (see with_huge_page_malloc)."""
    env = {name: value for name, value in os.environ.items() if not _SECRET_NAME.search(name)}
    return with_huge_page_malloc(env)


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
