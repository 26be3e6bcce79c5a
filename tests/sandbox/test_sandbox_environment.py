"""The sandbox zygote's environment is an allow-list (config.environment.INHERITED): a running, confined
render process holds the variables the engines read and none other, whatever their names; and it asks
glibc's malloc for transparent huge pages, unless the operator said otherwise in GLIBC_TUNABLES."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from docfence.config.environment import INHERITED, sandbox_environment, with_huge_page_malloc
from docfence.core.policy import JobPolicy, Limits
from docfence.samples import pdfs
from docfence.sandbox import Outcome, Sandbox, Task
from docfence.testing.barriers import HANG_GUARD_S
from docfence.testing.procs import wait_for
from docfence.testing.proctree import environ, render_processes

#: what must not reach a render process: a provider's auth_env names, cloud credentials, every
#: docfence setting the render process does not read, and a name no deny-list would think of
PLANTED = ("RENDERCO_AUTH", "RENDERCO_BEARER", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
           "AWS_SESSION_TOKEN", "DOCFENCE_DATABASE_URL", "DOCFENCE_STORAGE_URL", "DOCFENCE_PASSWORD_KEY",
           "DOCFENCE_SIGNING_SECRET", "DOCFENCE_SIGNING_PKCS12_PASSWORD", "DOCFENCE_LOG_LEVEL",
           "DOCFENCE_TEST_PG_URL", "PGPASSWORD", "OPAQUE_VALUE")
#: what the engines read, set here so the test sees it arrive
NEEDED = {"LANG": "C.UTF-8", "LC_CTYPE": "C.UTF-8", "TZ": "UTC", "FONTCONFIG_PATH": "/etc/fonts"}


def test_a_render_process_inherits_only_the_allow_list(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A real render process, confined and stalled at its `render` fault point (after confinement,
    before the engine runs): its /proc/PID/environ, what /proc/self/environ shows it, read by the kernel
    from the process's own memory."""
    for name in PLANTED:
        monkeypatch.setenv(name, f"planted-{name.lower()}")
    for name, value in NEEDED.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DOCFENCE_FAULTS", "render=sleep:3600")
    monkeypatch.setenv("DOCFENCE_FAULTS_DIR", str(tmp_path))
    source = tmp_path / "in.pdf"
    source.write_bytes(pdfs.many_pages(1))
    long = JobPolicy(limits=Limits(render_base_s=600.0, render_timeout_s=600.0))
    with Sandbox("watermark") as box:
        box.start()
        done: list[Outcome] = []
        thread = threading.Thread(target=lambda: done.append(
            box.run(Task("watermark", source, tmp_path / "out.pdf", long))))
        thread.start()
        try:
            (pid,) = wait_for(lambda: render_processes(box.zygote_pid or 0), HANG_GUARD_S, "a render process")
            wait_for(lambda: (Path(f"/proc/{pid}/status").read_text().count("NoNewPrivs:\t1") == 1),
                     HANG_GUARD_S, "the render process confined")
            seen = {name.decode(): value.decode() for name, value in environ(pid).items()}
        finally:
            os.kill(pid, signal.SIGKILL)
            thread.join(HANG_GUARD_S)
    assert done and not done[0].ok  # it never ran its task: killed at the fault point
    assert not set(PLANTED) & set(seen)
    assert not [name for name in seen if name not in INHERITED and not name.startswith("LC_")]
    assert {name: seen.get(name) for name in NEEDED} == NEEDED
    assert seen["PATH"] == os.environ["PATH"] and seen["DOCFENCE_FAULTS"] == "render=sleep:3600"
    assert "glibc.malloc.hugetlb=1" in seen["GLIBC_TUNABLES"]


def test_the_allow_list_keeps_names_not_patterns() -> None:
    given = {"PATH": "/bin", "LC_ALL": "C", "RENDERCO_AUTH": "x", "MY_KEYRING_PATH": "y",
             "DOCFENCE_CONFIG": "/etc/docfence.toml", "DOCFENCE_URL": "z", "GLIBC_TUNABLES": "a=1"}
    assert sandbox_environment(given) == {
        "PATH": "/bin", "LC_ALL": "C", "DOCFENCE_CONFIG": "/etc/docfence.toml",
        "GLIBC_TUNABLES": "a=1:glibc.malloc.hugetlb=1"}


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
