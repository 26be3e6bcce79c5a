"""[verification], [signing] and the per-class tables: a class that needs a setting that is missing, a
key that does not exist, a URL that is not one, or a PKCS#12 file the worker cannot open stops start-up
with one line naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from docfence.blobs import RegionRouter
from docfence.config import load_settings
from docfence.core.errors import ConfigError
from docfence.store.base import open_store
from docfence.testing.signing_ca import write_test_ca
from docfence.worker.runner import Worker

V = '[verification]\npublic_base_url = "https://v.example"\n'
BASE = '''
database_url = "sqlite:///{tmp}/docfence.db"
storage_url = "file:{tmp}/objects"
'''


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    path = tmp_path / "docfence.toml"
    path.write_text(BASE.format(tmp=tmp_path) + text)
    return load_settings(path, env=env or {})


@pytest.mark.parametrize(("text", "message"), [
    ("[classes.x.verification]\n", r"\[classes.x.verification\] needs \[verification\] public_base_url"),
    ("[classes.x.signing]\n", r"\[classes.x.signing\] needs \[signing\] pkcs12"),
    ("[verification]\npublic_base_url = \"ftp://x\"\n",
     r"public_base_url='ftp://x': must be an http\(s\) URL"),
    ("[verification]\npublic_base_url = \"https://v.example/?a=1\"\n", r"without a query"),
    ("[verification]\nrate = 3\n", r"\[verification\]: unknown key 'rate'"),
    (V + "[classes.x.verification]\ncorner = \"middle\"\n",
     r"\[classes.x.verification\]: verification corner must be one of"),
    (V + "[classes.x.verification]\nurl = \"https://a\"\n",
     r"url and code are set per job"),
    ("[classes.x.signing]\nvisible = \"yes\"\n",
     r"\[classes.x.signing\].visible='yes': must be true or false"),
    ("[signing]\npkcs12 = \"k.p12\"\n[classes.x.signing]\npage = \"middle\"\n",
     r"signing page must be first or last"),
])
def test_bad_settings_stop_start_up_naming_the_setting(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, text)


def test_a_class_with_both_loads_and_the_password_comes_from_the_environment(tmp_path: Path) -> None:
    settings = load(tmp_path, V + 'organisation = "Ex"\n[signing]\npkcs12 = "k.p12"\n'
                              'pkcs12_password = "in-file"\n[classes.x.verification]\npages = "all"\n'
                              '[classes.x.signing]\nvisible = true\n',
                    env={"DOCFENCE_SIGNING_PKCS12_PASSWORD": "from-env"})
    policy = settings.policy_for("x")
    assert policy.verification is not None and policy.verification.pages == "all"
    assert policy.signing is not None and policy.signing.visible is True
    assert settings.signing.pkcs12_password == "from-env"
    assert "from-env" not in repr(settings) and "in-file" not in repr(settings)
    assert settings.policy_for("default").verification is None


def test_a_worker_with_a_wrong_key_password_stops_at_start_up(tmp_path: Path) -> None:
    p12, made = write_test_ca(tmp_path)
    text = f'[signing]\npkcs12 = "{p12}"\n[classes.x.signing]\n'
    good = load(tmp_path, text, env={"DOCFENCE_SIGNING_PKCS12_PASSWORD": made.password})
    bad = load(tmp_path, text, env={"DOCFENCE_SIGNING_PKCS12_PASSWORD": "wrong"})
    store = open_store(good.database_url)
    try:
        router = RegionRouter.from_config(good.region_urls())
        Worker(good, store, router)
        with pytest.raises(ConfigError, match=r"\[signing\] pkcs12: the file or its password is wrong"):
            Worker(bad, store, router)
    finally:
        store.close()
