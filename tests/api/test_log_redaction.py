"""No webhook endpoint's URL reaches a log line: a real `docfence serve` and a real `docfence webhooks
deliver` at DEBUG deliver to loopback receivers whose URLs hold marker secrets in their path and query
(one answers 204, one 500, one refuses the connection), and no output stream of either process holds
a marker. The redacting filter keeps a URL's scheme://host and drops its path and query, whatever the
logger; libraries' records below WARNING are dropped unless asked for."""

from __future__ import annotations

import io
import json
import logging
import os
import secrets
import subprocess
from pathlib import Path

import pytest

from docfence.client import DocfenceClient
from docfence.config import Settings
from docfence.core.interpreter import module_command
from docfence.harness.tcp_proxy import free_port
from docfence.logs import JsonFormatter, RedactingFilter, configure, redact
from docfence.service import build_service
from docfence.testing.servers import serve_process
from docfence.testing.webhook_receiver import Receiver, receiving

from .conftest import PDF

MARKERS = {name: f"{name}-{secrets.token_hex(8)}" for name in ("PATHSECRET", "CODESECRET", "APIKEYSECRET")}
SUFFIX = f"/{MARKERS['PATHSECRET']}?code={MARKERS['CODESECRET']}&apikey={MARKERS['APIKEYSECRET']}"
DELIVER_GUARD_S = 180  # a hang guard only: the machine is shared


def test_no_process_logs_a_webhook_url_at_debug(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/docfence.db",
                        storage_url=f"file://{tmp_path}/objects")
    service = build_service(settings)
    key = service.create_api_key("acme", ("admin",))[1]
    config = tmp_path / "docfence.toml"
    config.write_text('[webhooks]\nallow_hosts = ["127.0.0.1"]\n')
    env = dict(os.environ, DOCFENCE_DATABASE_URL=settings.database_url,
               DOCFENCE_STORAGE_URL=settings.storage_url, DOCFENCE_CONFIG=str(config),
               DOCFENCE_LOG_LEVEL="DEBUG")
    ok, failing = Receiver(secret=""), Receiver(secret="", mode="500")
    with receiving(ok) as ok_url, receiving(failing) as failing_url, \
            serve_process(env, tmp_path / "serve.log", log_level="debug") as (_proc, base), \
            DocfenceClient(base, key) as client:
        refused_url = f"http://127.0.0.1:{free_port()}/hooks"  # nothing listens there
        for receiver, url in ((ok, ok_url), (failing, failing_url), (None, refused_url)):
            created = client.create_webhook_endpoint(url + SUFFIX, ["job.canceled"])
            if receiver is not None:
                receiver.secret = created["secret"]
        client.cancel(client.submit(PDF).id)
        deliver = subprocess.run(module_command("docfence.cli", "webhooks", "deliver", "--once", "--json"),
                                 env=env, capture_output=True, timeout=DELIVER_GUARD_S)
    assert deliver.returncode == 0, deliver.stderr.decode()[-2000:]
    assert json.loads(deliver.stdout)["delivered"] == 1
    assert len(ok.received) == 1 and len(failing.received) == 1  # both were really asked
    streams = {"serve": (tmp_path / "serve.log").read_text("utf-8", "replace"),
               "deliver stdout": deliver.stdout.decode("utf-8", "replace"),
               "deliver stderr": deliver.stderr.decode("utf-8", "replace")}
    assert "delivery attempt 1 to endpoint" in streams["deliver stderr"]  # the logs were live
    leaks = {(stream, name) for stream, text in streams.items() for name, marker in MARKERS.items()
             if marker in text}
    assert leaks == set(), leaks


@pytest.mark.parametrize("text, expected", [
    ("HTTP Request: POST http://127.0.0.1:9/hook/SECRET?code=X \"HTTP/1.1 204\"",
     "HTTP Request: POST http://127.0.0.1:9/[redacted] \"HTTP/1.1 204\""),
    ("to https://hooks.example.org/a/b#frag.", "to https://hooks.example.org/[redacted]."),
    ("postgresql://user:pw@db.internal:5432/docfence", "postgresql://db.internal:5432/[redacted]"),
    ("API running on http://127.0.0.1:8080", "API running on http://127.0.0.1:8080"),
    ("plain http://host/ stays", "plain http://host/ stays"),
    ("sqlite:///docfence-data/docfence.db has no host", "sqlite:///docfence-data/docfence.db has no host"),
])
def test_a_url_keeps_only_its_scheme_and_host(text: str, expected: str) -> None:
    assert redact(text) == expected


def _formatted(logger: str, level: int, msg: str, *args: object) -> str:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter())
    record = logging.LogRecord(logger, level, __file__, 1, msg, args, None)
    if handler.filter(record):
        handler.emit(record)
    return out.getvalue()


def test_arguments_are_redacted_one_by_one() -> None:
    """urllib3 logs the origin and the path as separate arguments: the path is not a URL a text scan
    would find, so a library's path argument is dropped as an argument."""
    line = _formatted("urllib3.connectionpool", logging.WARNING, '%s://%s:%s "%s %s %s" %s %s', "https",
                      "hooks.example.org", 443, "POST", "/PATHSECRET?apikey=KEY", "HTTP/1.1", 204, 0)
    assert "PATHSECRET" not in line and "KEY" not in line and "hooks.example.org" in line
    line = _formatted("docfence.webhooks", logging.WARNING, "endpoint %s", "https://h.example/p?q=SECRET")
    assert "SECRET" not in json.loads(line)["msg"] and "https://h.example/" in line


def test_libraries_below_warning_are_dropped_unless_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    """The root logger is put back by conftest's _restore_root_logging."""
    configure("DEBUG")
    logging.getLogger("httpx").info("library info")
    logging.getLogger("uvicorn.error").info("server info")
    logging.getLogger("botocore.endpoint").warning("library warning")
    logging.getLogger("docfence.webhooks").debug("own debug")
    configure("DEBUG", library_level="INFO")
    logging.getLogger("httpx").info("asked-for info")
    messages = [json.loads(line)["msg"] for line in capsys.readouterr().err.splitlines()]
    assert messages == ["library warning", "own debug", "asked-for info"]
