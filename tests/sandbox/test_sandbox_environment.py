"""The sandbox zygote's environment asks glibc's malloc for transparent huge pages, unless the operator
said otherwise in GLIBC_TUNABLES."""

from __future__ import annotations

import pytest

from docfence.config.environment import with_huge_page_malloc
from docfence.sandbox import Sandbox
from docfence.testing.proctree import environ


def test_added_when_absent_and_appended_to_other_tunables() -> None:
    assert with_huge_page_malloc({"A": "1"}) == {"A": "1", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    assert with_huge_page_malloc({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})["GLIBC_TUNABLES"] == \
        "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    assert with_huge_page_malloc({"GLIBC_TUNABLES": ""})["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"


@pytest.mark.parametrize("given", ["glibc.malloc.hugetlb=0",
                                   "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=0"])
def test_an_operators_own_value_is_kept(given: str) -> None:
    assert with_huge_page_malloc({"GLIBC_TUNABLES": given}) == {"GLIBC_TUNABLES": given}


def _zygote_tunables(box: Sandbox) -> bytes | None:
    assert box.zygote_pid is not None
    return environ(box.zygote_pid).get(b"GLIBC_TUNABLES")


def test_the_zygote_runs_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    with Sandbox("sign") as box:
        box.start()
        assert _zygote_tunables(box) == b"glibc.malloc.hugetlb=1"
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=0")
    with Sandbox("sign") as box:
        box.start()
        assert _zygote_tunables(box) == b"glibc.malloc.hugetlb=0"
