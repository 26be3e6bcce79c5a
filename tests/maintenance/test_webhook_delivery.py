"""Webhook delivery against a real loopback receiver that verifies every signature with the
`standardwebhooks` library, on both stores: down, 500, hanging, slow; nothing lost, nothing sent twice
for one attempt number, deadlines end in `failed` with a reason, the SSRF policy refuses what it must."""

from __future__ import annotations

import random
import threading

import pytest

from docfence.config import WebhooksConfig
from docfence.core.clock import FakeClock
from docfence.core.policy import JobPolicy
from docfence.core.records import ArtifactInfo, NewJob
from docfence.maintenance.webhook_endpoints import WebhookEndpoints
from docfence.maintenance.webhook_http import AddressPolicy, DestinationRefused
from docfence.maintenance.webhooks import WebhookDispatcher
from docfence.store.audit import verify_events
from docfence.testing.servers import free_port
from docfence.testing.webhook_receiver import Receiver, payload_text, receiving

LOOPBACK = WebhooksConfig(allow_hosts=("127.0.0.1",), read_timeout_s=1.0, connect_timeout_s=1.0,
                          backoff_base_s=10.0, backoff_max_s=600.0)


def finished_job(store, n: int = 1, tenant: str = "t1") -> list[str]:  # type: ignore[no-untyped-def]
    ids = []
    for _ in range(n):
        job, _ = store.submit(NewJob(tenant=tenant, policy=JobPolicy()))
        ids.append(job.id)
    for claim in store.claim("w1", limit=n):
        store.complete(claim.job.id, claim.attempt, "w1",
                       ArtifactInfo(f"jobs/{tenant}/{claim.job.id}/a/1.pdf", "cd" * 32, 99, 2, {"ok": True}))
    return ids


def dispatcher(store, config: WebhooksConfig = LOOPBACK, name: str = "d1") -> WebhookDispatcher:  # type: ignore[no-untyped-def]
    return WebhookDispatcher(store, config, worker=name, rng=random.Random(7))


def endpoint_for(store, url: str, config: WebhooksConfig = LOOPBACK) -> str:  # type: ignore[no-untyped-def]
    issued = WebhookEndpoints(store, config).create("t1", url, ["*"], actor="op")
    return issued.secret


def test_delivers_signed_payloads_without_secrets_or_content(store) -> None:  # type: ignore[no-untyped-def]
    receiver = Receiver(secret="")
    with receiving(receiver) as url:
        receiver.secret = endpoint_for(store, url)
        (job_id,) = finished_job(store)
        result = dispatcher(store).run_once()
    assert len(result.delivered) == 1 and receiver.bad_signatures == 0
    (payload,) = receiver.payloads.values()
    assert payload["type"] == "job.succeeded"
    data = payload["data"]
    assert data["job_id"] == job_id and data["sha256"] == "cd" * 32 and data["pages"] == 2
    assert data["links"]["artifact"] == f"/v1/jobs/{job_id}/artifact"
    text = payload_text(receiver)
    for secret_like in ("whsec_", "dfk_", "/v1/signed/", "jobs/t1/"):  # no keys, signed URLs, storage keys
        assert secret_like not in text
    activity = store.webhook_activity(job_id)
    assert [(d.state, d.attempt, d.last_status) for d in activity.deliveries] == [("delivered", 1, 204)]
    assert activity.attempts[0].outcome == "delivered" and activity.attempts[0].latency_ms is not None
    # the attempt is on the job's own audit chain (API events, `docfence inspect`, console timeline)
    (audited,) = [e for e in store.audit_events(job_id) if e.action == "webhook_attempt"]
    assert audited.reason == "delivered" and audited.details["status_code"] == 204
    assert audited.details["host"] == "127.0.0.1" and "/hooks/" not in str(audited.details)
    assert verify_events(store.iter_audit(), store.audit_heads()).ok


def test_receiver_down_then_up_is_retried_with_backoff_and_delivered_once(store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    port = free_port()  # nothing listens there yet: connection refused
    url = f"http://127.0.0.1:{port}/hooks/docfence"
    receiver = Receiver(secret=endpoint_for(store, url))
    ids = finished_job(store, 3)
    d = dispatcher(store)
    first = d.run_once()
    assert len(first.retried) == 1 and not first.delivered  # the endpoint's other two wait with it
    assert d.run_once().retried == []  # backing off: nothing is due
    clock.advance(10)  # attempt 1 waits 5-10 s (base 10 with jitter in [0.5, 1))
    assert len(d.run_once().retried) == 1  # still down
    with receiving(receiver, port):
        clock.advance(20)
        assert len(d.run_once().delivered) == 3
        clock.advance(3600)
        assert d.run_once().delivered == []  # nothing is sent again
    assert sorted(p["data"]["job_id"] for p in receiver.payloads.values()) == sorted(ids)
    assert len(receiver.received) == len(set(receiver.received)) == 3
    attempts = [a for job_id in ids for a in store.webhook_activity(job_id).attempts]
    assert sorted(a.outcome for a in attempts) == ["delivered"] * 3 + ["retry"] * 2
    assert all("ConnectError" in (a.error or "") for a in attempts if a.outcome == "retry")


def test_backoff_is_exponential_with_jitter_and_capped(store) -> None:  # type: ignore[no-untyped-def]
    d = dispatcher(store)
    delays = [d.backoff(n) for n in range(1, 10)]
    for n, delay in enumerate(delays, start=1):
        cap = min(600.0, 10.0 * 2 ** (n - 1))
        assert cap / 2 <= delay < cap
    assert len({round(x / min(600.0, 10.0 * 2 ** i), 6) for i, x in enumerate(delays)}) > 1  # jittered


def test_500_is_recorded_then_fails_at_the_deadline(store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    config = WebhooksConfig(allow_hosts=("127.0.0.1",), read_timeout_s=1.0, connect_timeout_s=1.0,
                            backoff_base_s=600.0, backoff_max_s=3600.0, delivery_deadline_s=3000.0)
    receiver = Receiver(secret="", mode="500")
    with receiving(receiver) as url:
        receiver.secret = endpoint_for(store, url, config)
        (job_id,) = finished_job(store)
        d = dispatcher(store, config)
        for _ in range(10):
            d.run_once()
            clock.advance(1000)
    activity = store.webhook_activity(job_id)
    (delivery,) = activity.deliveries
    assert delivery.state == "failed" and delivery.last_status == 500
    reason = delivery.failure_reason or ""
    assert reason.startswith("deadline_exceeded") and "HTTP 500" in reason
    assert all(a.status_code == 500 and len(a.body_prefix.encode()) == 256 for a in activity.attempts)
    assert len(receiver.received) == len(activity.attempts) >= 2  # every attempt was made and recorded


def test_a_hanging_receiver_times_out_and_a_slow_one_is_waited_for(store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    receiver = Receiver(secret="", mode="hang")
    with receiving(receiver) as url:
        receiver.secret = endpoint_for(store, url)
        (job_id,) = finished_job(store)
        d = dispatcher(store)
        assert len(d.run_once().retried) == 1  # the read timeout ended the attempt
        receiver.release.set()
        receiver.mode, receiver.release = "slow", threading.Event()
        clock.advance(10)
        done: list[object] = []
        sender = threading.Thread(target=lambda: done.append(d.run_once()))
        sender.start()
        assert receiver.mid_answer.wait(30)  # the answer has begun; the dispatcher is reading it
        receiver.release.set()
        sender.join(30)
    assert done and len(done[0].delivered) == 1  # type: ignore[attr-defined]
    attempts = store.webhook_activity(job_id).attempts
    assert [(a.outcome, a.error) for a in attempts] == [("retry", "read timeout"), ("delivered", None)]
    assert [n for _, n in receiver.received] == [1, 2]  # same webhook-id, one request per attempt


def test_private_addresses_are_refused_unless_allowed(store) -> None:  # type: ignore[no-untyped-def]
    policy = AddressPolicy(("10.1.0.0/16", "hooks.internal"))
    for address in ["127.0.0.1", "10.2.0.1", "169.254.169.254", "::1", "0.0.0.0", "224.0.0.1",
                    "::ffff:127.0.0.1", "fe80::1", "192.168.1.1", "100.64.0.1"]:
        with pytest.raises(DestinationRefused):
            policy.check("a.example", [address])
    with pytest.raises(DestinationRefused):  # one private address among public ones is enough
        policy.check("a.example", ["93.184.216.34", "10.9.9.9"])
    assert str(policy.check("a.example", ["10.1.2.3"])) == "10.1.2.3"
    assert str(policy.check("hooks.internal", ["127.0.0.1"])) == "127.0.0.1"
    assert str(policy.check("a.example", ["93.184.216.34"])) == "93.184.216.34"


def test_6to4_and_site_local_ipv6_addresses_are_refused_unless_allowed() -> None:
    policy = AddressPolicy()
    for address in ["2002:a00:1::1", "2002:7f00:1::1", "2002:a9fe:a9fe::1", "fec0::1", "feff::1"]:
        with pytest.raises(DestinationRefused):  # 6to4 embedding a private IPv4; site-local fec0::/10
            policy.check("a.example", [address])
    assert str(policy.check("a.example", ["2002:5db8:d822::1"])) == "2002:5db8:d822::1"  # 93.184.216.34
    allowing = AddressPolicy(("2002::/16", "fec0::/10"))
    assert str(allowing.check("a.example", ["2002:a00:1::1"])) == "2002:a00:1::1"
    assert str(allowing.check("a.example", ["fec0::1"])) == "fec0::1"


def test_a_refused_destination_fails_at_once_and_sends_nothing(store) -> None:  # type: ignore[no-untyped-def]
    receiver = Receiver(secret="")
    with receiving(receiver) as url:
        localhost_url = url.replace("127.0.0.1", "localhost")  # a name: checked at delivery, not creation
        endpoint_for(store, localhost_url, WebhooksConfig(allow_hosts=("localhost",)))
        (job_id,) = finished_job(store)
        result = dispatcher(store, WebhooksConfig()).run_once()  # this dispatcher allows nothing private
    assert len(result.failed) == 1 and receiver.received == []
    (delivery,) = store.webhook_activity(job_id).deliveries
    assert delivery.state == "failed" and delivery.failure_reason.startswith("destination_refused")


def test_redirects_are_not_followed(store) -> None:  # type: ignore[no-untyped-def]
    from http.server import BaseHTTPRequestHandler

    receiver = Receiver(secret="")
    followed: list[str] = []
    original = receiver._answer

    def redirect(handler: BaseHTTPRequestHandler) -> None:
        if handler.path.endswith("/elsewhere"):
            followed.append(handler.path)
            return original(handler)
        handler.send_response(307)
        handler.send_header("location", "/elsewhere")
        handler.send_header("content-length", "0")
        handler.end_headers()

    receiver._answer = redirect  # type: ignore[method-assign]
    with receiving(receiver) as url:
        receiver.secret = endpoint_for(store, url)
        (job_id,) = finished_job(store)
        assert len(dispatcher(store).run_once().retried) == 1
    assert followed == [] and store.webhook_activity(job_id).attempts[0].status_code == 307


def test_the_request_goes_to_the_checked_address_with_the_original_host(store) -> None:  # type: ignore[no-untyped-def]
    from docfence.maintenance.webhook_http import GuardedTransport, Timeouts

    lookups: list[str] = []

    def resolver(host: str, port: int) -> list[str]:  # the one lookup; the connection reuses its answer
        lookups.append(host)
        return ["127.0.0.1"]

    receiver = Receiver(secret="")
    with receiving(receiver) as url:
        named = url.replace("127.0.0.1", "hooks.invalid")  # a name no system resolver knows
        receiver.secret = endpoint_for(store, named)
        finished_job(store)
        transport = GuardedTransport(AddressPolicy(("127.0.0.1",)), Timeouts(2.0, 2.0, 10.0),
                                     resolver=resolver)
        d = WebhookDispatcher(store, LOOPBACK, worker="d1", rng=random.Random(1), transport=transport)
        assert len(d.run_once().delivered) == 1
    assert lookups == ["hooks.invalid"]
    assert receiver.headers[0]["host"] == named.split("/")[2]


def test_public_url_makes_the_links_absolute_in_the_signed_body(store) -> None:  # type: ignore[no-untyped-def]
    config = WebhooksConfig(allow_hosts=("127.0.0.1",), public_url="https://pdf.example.org/")
    receiver = Receiver(secret="")
    with receiving(receiver) as url:
        receiver.secret = endpoint_for(store, url, config)
        (job_id,) = finished_job(store)
        assert len(dispatcher(store, config).run_once().delivered) == 1 and receiver.bad_signatures == 0
    (payload,) = receiver.payloads.values()
    assert payload["data"]["links"]["job"] == f"https://pdf.example.org/v1/jobs/{job_id}"


def test_a_receiver_that_trickles_its_answer_is_cut_off_at_the_attempt_time_limit(store) -> None:  # type: ignore[no-untyped-def]
    from docfence.maintenance.webhook_http import GuardedTransport, Timeouts

    receiver = Receiver(secret="", mode="drip")  # one header byte at a time, each well within read_s
    with receiving(receiver) as url:
        receiver.secret = endpoint_for(store, url)
        (job_id,) = finished_job(store)
        transport = GuardedTransport(AddressPolicy(("127.0.0.1",)), Timeouts(2.0, 2.0, total_s=0.5))
        d = WebhookDispatcher(store, LOOPBACK, worker="d1", rng=random.Random(1), transport=transport)
        assert len(d.run_once().retried) == 1
    (attempt,) = store.webhook_activity(job_id).attempts
    assert attempt.outcome == "retry" and attempt.error == "attempt time limit (0.5 s)"


@pytest.mark.parametrize("certified, delivered", [("hooks.test", True), ("other.test", False)])
def test_https_pins_the_address_and_checks_the_certificate_against_the_url_host(  # type: ignore[no-untyped-def]
        store, tmp_path, certified: str, delivered: bool) -> None:
    from docfence.maintenance.webhook_http import GuardedTransport, Timeouts
    from docfence.testing.webhook_receiver import tls_pair

    server_tls, client_tls = tls_pair(tmp_path, certified)
    receiver = Receiver(secret="")
    with receiving(receiver, tls=server_tls) as url:
        named = url.replace("127.0.0.1", "hooks.test")  # resolved by the test's resolver only
        receiver.secret = endpoint_for(store, named)
        (job_id,) = finished_job(store)
        transport = GuardedTransport(AddressPolicy(("127.0.0.1",)), Timeouts(2.0, 2.0, 10.0),
                                     resolver=lambda host, port: ["127.0.0.1"], ssl_context=client_tls)
        result = WebhookDispatcher(store, LOOPBACK, worker="d1", transport=transport).run_once()
    assert len(result.delivered) == int(delivered) and len(receiver.received) == int(delivered)
    if not delivered:  # a certificate for another name: refused by the TLS check, nothing sent
        (attempt,) = store.webhook_activity(job_id).attempts
        assert "CERTIFICATE_VERIFY_FAILED" in (attempt.error or "") or "certificate" in (attempt.error or "")


def test_concurrent_dispatchers_deliver_each_event_once(store) -> None:  # type: ignore[no-untyped-def]
    receiver = Receiver(secret="")
    with receiving(receiver) as url:
        receiver.secret = endpoint_for(store, url)
        finished_job(store, 20)
        start = threading.Barrier(3)
        results: list[object] = []

        def run(name: str) -> None:
            d = dispatcher(store, name=name)
            start.wait(30)
            results.append(d.run_once())

        threads = [threading.Thread(target=run, args=(f"d{i}",)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    delivered = [key for r in results for key in r.delivered]  # type: ignore[attr-defined]
    assert len(delivered) == len(set(delivered)) == 20 and len(receiver.payloads) == 20
    assert len(receiver.received) == len(set(receiver.received)) == 20  # one request per event, attempt 1


def test_a_receiver_that_is_down_holds_up_neither_its_backlog_nor_other_endpoints(store, clock) -> None:  # type: ignore[no-untyped-def]
    up = Receiver(secret="")
    down_url = f"http://127.0.0.1:{free_port()}/hooks/down"  # connection refused
    with receiving(up) as url:
        endpoints = WebhookEndpoints(store, LOOPBACK)
        endpoints.create("t1", down_url, ["*"], actor="op")
        up.secret = endpoints.create("t2", url, ["*"], actor="op").secret
        finished_job(store, 5, tenant="t1")
        clock.advance(1)  # t2's events are younger: without the postponement they would wait behind t1's
        finished_job(store, 5, tenant="t2")
        result = dispatcher(store).run_once()
    assert len(result.retried) == 1 and len(result.delivered) == 5  # one attempt at the dead receiver
    clock.advance(10)  # the first backoff (5-10 s) is over: again one attempt, not five
    assert len(dispatcher(store).run_once().retried) == 1


def test_a_host_the_resolver_cannot_encode_is_refused_and_never_stops_the_dispatcher(  # type: ignore[no-untyped-def]
        store, monkeypatch) -> None:
    """`http://a..b/` passes urlsplit but makes getaddrinfo raise UnicodeError (not OSError): refused
    at creation, and an endpoint stored with it before that check fails its delivery instead of killing
    the dispatcher (which delivers every tenant's webhooks)."""
    from docfence.core.errors import InvalidRequest
    from docfence.maintenance import webhook_endpoints

    with pytest.raises(InvalidRequest) as refused:
        WebhookEndpoints(store, LOOPBACK).create("t1", "http://a..b/", ["*"], actor="op")
    assert refused.value.field == "url"
    monkeypatch.setattr(webhook_endpoints, "check_endpoint_url", lambda url, config: url)
    endpoint_for(store, "http://a..b/hooks")
    (job_id,) = finished_job(store)
    result = dispatcher(store).run_once()
    assert len(result.failed) == 1
    (delivery,) = store.webhook_activity(job_id).deliveries
    assert delivery.state == "failed" and delivery.failure_reason.startswith("destination_refused")


def test_an_unexpected_error_while_sending_is_a_retried_attempt(store) -> None:  # type: ignore[no-untyped-def]
    class Exploding:
        def send(self, url: str, body: bytes, headers: object) -> None:
            raise RuntimeError("a bug below the transport")

    endpoint_for(store, "http://127.0.0.1:9/hooks")
    (job_id,) = finished_job(store)
    d = dispatcher(store)
    d.transport = Exploding()  # type: ignore[assignment]
    result = d.run_once()
    assert len(result.retried) == 1
    (attempt,) = store.webhook_activity(job_id).attempts
    assert attempt.error == "delivery error: RuntimeError"


def test_a_resolver_that_hangs_is_given_up_on_within_the_attempt(store) -> None:  # type: ignore[no-untyped-def]
    """A tenant's slow DNS server holds the dispatcher for the connect time at most, not for the
    system resolver's own timeout: the attempt records the timed-out lookup and is retried."""
    from docfence.maintenance.webhook_http import GuardedTransport, Timeouts

    release = threading.Event()
    lookups: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        lookups.append(host)
        if not release.wait(timeout=60.0):  # only stops a broken build from hanging
            raise OSError("the test's resolver was never released")
        return ["127.0.0.1"]

    endpoint_for(store, "http://hooks.invalid:9/hooks")
    (job_id,) = finished_job(store)
    transport = GuardedTransport(AddressPolicy(("127.0.0.1",)), Timeouts(0.05, 2.0, 10.0), resolver=resolver)
    d = WebhookDispatcher(store, LOOPBACK, worker="d1", rng=random.Random(1), transport=transport)
    try:
        assert len(d.run_once().retried) == 1
    finally:
        release.set()
    (attempt,) = store.webhook_activity(job_id).attempts
    assert lookups == ["hooks.invalid"] and attempt.status_code is None
    assert attempt.error == "cannot resolve hooks.invalid (timed out)"
