"""docfence's image as users deploy it, run under podman on this machine: the embedded default (a `serve`
and a `worker` container sharing one volume) and a scale-out (`db upgrade` as a one-shot container, two API
servers, two workers and a reconciler on PostgreSQL and an S3 server, one worker killed mid-job). Judged
from outside: HTTP, qpdf and poppler, the database's rows. Selected only with `-m containers`."""

from __future__ import annotations

import base64
import functools
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from docfence.blobs import open_blob_store
from docfence.client import DocfenceClient
from docfence.core.clock import monotonic
from docfence.harness import fault_runs
from docfence.harness.cluster import HEARTBEAT_S, LEASE_TTL_S, RECONCILE_S, Cluster
from docfence.harness.cluster_rows import Rows
from docfence.harness.databases import temporary_pg_database
from docfence.harness.fault_runs import TERMINAL, Verdict, judge, stale_staged
from docfence.harness.tcp_proxy import free_port
from docfence.harness.workers import wait_for
from docfence.samples.pdfs import links
from docfence.testing.blob_contract import run_moto_server
from docfence.testing.judges import pdfinfo, qpdf_check
from docfence.testing.procs import REPO
from docfence.testing.s3_env import DUMMY_AWS_ENV, use_dummy_aws

pytestmark = [pytest.mark.containers, pytest.mark.timeout(900)]

IMAGE = os.environ.get("DOCFENCE_IMAGE", "localhost/docfence:ci")
CONTAINERS_CONF = REPO / ".ci" / "containers.conf"  # runc, cgroupfs, no default ulimits (see the file)
READY_GUARD_S = 60.0  # a hang guard on start-up only; the measured time to healthy is reported
JOBS_GUARD_S = 300.0  # the same for the jobs: far above what they take
SCALE_JOBS = 50
S3_BUCKET, S3_REGION = "docfence-containers", "us-east-1"
SECRETS_MOUNT = "/run/docfence-secrets"
IMAGE_UID = 10001  # the image's docfence user (Containerfile)
KILL_POINT = "after_staging_upload"  # the killed worker has rendered and uploaded, and not committed


@dataclass
class Podman:
    """podman with this machine's settings. Every container and volume it makes carries this run's label
    and is removed by `remove_all`. Values in `env` reach a container only by name (`-e NAME`), so no
    secret is ever on a command line."""

    run_id: str
    logs_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    options: list[str] = field(default_factory=list)  # given to every container (network, shared mounts)
    started: list[str] = field(default_factory=list)

    def __call__(self, *args: str, timeout: float = 120.0,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(CONTAINERS_CONF)),
               **self.env}
        done = subprocess.run(["podman", *args], capture_output=True, text=True, env=env, timeout=timeout,
                              check=False)
        if check and done.returncode != 0:
            shown = " ".join(args[:3])
            raise AssertionError(f"podman {shown}: exit {done.returncode}: {done.stderr[-2000:]}")
        return done

    def name(self, role: str) -> str:
        return f"docfence-ci-{self.run_id}-{role}"

    def _run_args(self, options: Sequence[str]) -> list[str]:
        return ["--label", f"docfence-ci={self.run_id}", *(f"-e{name}" for name in self.env), *self.options,
                *options]

    def start(self, role: str, *command: str, options: Sequence[str] = (), health: bool = False) -> None:
        """`podman run -d` of the image as `role`; only `serve` has a health check to run."""
        extra = [] if health else ["--no-healthcheck"]
        self("run", "-d", "--name", self.name(role), *self._run_args([*extra, *options]), IMAGE, *command)
        self.started.append(role)

    def once(self, *command: str, options: Sequence[str] = ()) -> str:
        """A one-shot container (`db upgrade`, `keys create`): its output; it must exit 0."""
        done = self("run", "--rm", "--no-healthcheck", *self._run_args(options), IMAGE, *command)
        return done.stdout

    def running(self, role: str) -> bool:
        state = self("inspect", "--format", "{{.State.Running}}", self.name(role), check=False)
        return state.stdout.strip() == "true"

    def published_port(self, role: str, port: int) -> int:
        return int(self("port", self.name(role), str(port)).stdout.strip().rsplit(":", 1)[1])

    def volume(self, role: str) -> str:
        self("volume", "create", "--label", f"docfence-ci={self.run_id}", self.name(role))
        return self.name(role)

    def remove_all(self) -> None:
        """Keep each container's log beside the test (shown when it fails), then remove what this run made."""
        for role in self.started:  # each once: the test may remove them before the fixture does
            log = self("logs", self.name(role), check=False)
            (self.logs_dir / f"{role}.log").write_text(log.stdout + log.stderr)
            print(f"--- {role} (last lines)\n{(log.stdout + log.stderr)[-1500:]}")
        self.started.clear()
        label = f"label=docfence-ci={self.run_id}"
        ids = self("ps", "-a", "-q", "--filter", label, check=False).stdout.split()
        if ids:
            self("rm", "-f", "-v", "-t", "0", *ids, check=False)  # -v: the image VOLUME's anonymous ones too
        volumes = self("volume", "ls", "-q", "--filter", label, check=False).stdout.split()
        if volumes:
            self("volume", "rm", "-f", *volumes, check=False)


def _cannot_run_containers(podman: Podman) -> str:
    """Why podman cannot run the image here ("" when it can)."""
    if shutil.which("podman") is None:
        return "podman is not installed (.ci/install installs it)"
    probe = podman("run", "--rm", "--no-healthcheck", "--entrypoint", "true", IMAGE, check=False)
    missing_image = "image not known" in probe.stderr or "unable to find" in probe.stderr
    if probe.returncode != 0 and not missing_image:
        return f"podman cannot run a container here: {probe.stderr.strip()[-500:]}"
    return ""


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The image under test: built by .ci/container-image (CI's container step) or here when missing;
    the tests skip, saying why, only when podman cannot run a container on this machine."""
    probe = Podman("probe", tmp_path_factory.mktemp("probe"))
    why = _cannot_run_containers(probe)
    if why:
        pytest.skip(why)
    if probe("image", "exists", IMAGE, check=False).returncode != 0:
        subprocess.run([str(REPO / ".ci" / "container-image")], check=True, timeout=900,
                       env={**os.environ, "DOCFENCE_IMAGE": IMAGE})
    return IMAGE


@pytest.fixture
def podman(image: str, tmp_path: Path) -> Iterator[Podman]:
    (tmp_path / "logs").mkdir()
    runner = Podman(secrets.token_hex(4), tmp_path / "logs")
    try:
        yield runner
    finally:
        runner.remove_all()


def _deployment_secrets() -> dict[str, str]:
    """What every process of one deployment shares, made per run, given at run time (never in the image)."""
    password_key = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
    return {"DOCFENCE_SIGNING_SECRET": secrets.token_hex(32), "DOCFENCE_PASSWORD_KEY": password_key}


def _wait_ready(podman: Podman, role: str, base_url: str, since: float) -> dict[str, float]:
    """Poll (bounded) until /healthz, then /readyz (the database answers, the schema is current) answer 200:
    seconds from `since` (just before `podman run`) to each."""
    seen: dict[str, float] = {}

    def probe() -> bool:
        for path in ("healthz", "readyz"):
            if path in seen:
                continue
            try:
                ok = httpx.get(f"{base_url}/{path}", timeout=2).status_code == 200
            except httpx.HTTPError:
                ok = False
            if not ok:
                if not podman.running(role):
                    raise AssertionError(f"the {role} container exited before it was ready")
                return False
            seen[path] = round(monotonic() - since, 2)
        return True

    wait_for(probe, READY_GUARD_S, f"{role} to answer /healthz and /readyz")
    return {"start_to_healthy_s": seen["healthz"], "start_to_ready_s": seen["readyz"]}


def _key(podman: Podman, options: Sequence[str]) -> str:
    out = podman.once("keys", "create", "--tenant", "acme", "--scopes", "submit,read", "--json",
                      options=options)
    key: str = json.loads(out.strip().splitlines()[-1])["key"]
    return key


def _report(capsys: pytest.CaptureFixture[str], figures: dict[str, Any]) -> None:
    with capsys.disabled():
        print(f"\ncontainer figures: {json.dumps(figures, sort_keys=True)}")


# -- (a) the embedded default --------------------------------------------------------------------------
def test_image_contract(podman: Podman) -> None:
    """Non-root, a health check kept in the image (docker format), `docfence` the entry point, no secret."""
    inspected = json.loads(podman("image", "inspect", IMAGE).stdout)[0]
    config = inspected["Config"]
    assert config["User"] == "docfence:docfence"
    assert config["Entrypoint"] == ["docfence"]
    assert config["Cmd"] == ["serve", "--host", "0.0.0.0", "--port", "8080"]
    assert "/healthz" in " ".join(inspected["Healthcheck"]["Test"])  # podman keeps it beside the OCI config
    assert "/var/lib/docfence" in config["Volumes"]
    baked = {entry.split("=", 1)[0] for entry in config["Env"]}
    assert not baked & {"DOCFENCE_SIGNING_SECRET", "DOCFENCE_PASSWORD_KEY", "AWS_SECRET_ACCESS_KEY"}, baked
    version = podman("run", "--rm", "--no-healthcheck", IMAGE, "--version").stdout
    assert version.startswith("docfence "), version


def test_embedded_default_serve_and_worker_share_a_volume(
    podman: Podman, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    podman.env.update(_deployment_secrets())
    data = ["-v", f"{podman.volume('data')}:/var/lib/docfence"]
    key = _key(podman, data)
    since = monotonic()
    podman.start("serve", options=[*data, "-p", "127.0.0.1::8080"], health=True)
    base_url = f"http://127.0.0.1:{podman.published_port('serve', 8080)}"
    figures = _wait_ready(podman, "serve", base_url, since)
    podman("healthcheck", "run", podman.name("serve"))  # the image's own HEALTHCHECK passes
    podman.start("worker", "worker", options=data)

    started = monotonic()
    with DocfenceClient(base_url, key) as client:
        job = client.submit(("report.pdf", links()))
        done = client.wait(job.id, budget_s=JOBS_GUARD_S)
        assert done.state == "succeeded" and done.attempt == 1, done
        artifact = client.download(job.id, tmp_path / "artifact.pdf")
    figures["embedded_job_s"] = round(monotonic() - started, 2)
    qpdf_check(artifact)  # exit 0, no warning
    assert pdfinfo(artifact)["Pages"] == "2"
    assert done.artifact is not None and done.artifact.pages == 2
    _report(capsys, {"embedded": figures})


# -- (b) scale-out ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScaleOut:
    db_url: str
    storage_url: str
    api_urls: tuple[str, ...]
    key: str
    faults: Path
    secrets: Path  # the host side of the mount every container shares (the key-encryption key file)


def _scale_out_env(db_url: str, storage_url: str) -> dict[str, str]:
    """Every container's environment: the stores, the deployment's secrets (the key-encryption key file
    on a mount every container shares), short leases so a killed worker's job comes back in seconds,
    dummy credentials for the loopback S3 server."""
    return {"DOCFENCE_DATABASE_URL": db_url, "DOCFENCE_STORAGE_URL": storage_url, **_deployment_secrets(),
            "DOCFENCE_KEK_FILE": f"{SECRETS_MOUNT}/kek.key",
            "DOCFENCE_LEASE_TTL_S": str(LEASE_TTL_S), "DOCFENCE_HEARTBEAT_INTERVAL_S": str(HEARTBEAT_S),
            "DOCFENCE_RECONCILE_INTERVAL_S": str(RECONCILE_S), "DOCFENCE_POLL_INTERVAL_S": "0.2",
            "DOCFENCE_STAGING_GRACE_S": "1", **DUMMY_AWS_ENV}


def _deploy(podman: Podman, stack: ExitStack, tmp_path: Path, figures: dict[str, Any]) -> ScaleOut:
    """A fresh database and bucket; `db upgrade` and `keys create` as one-shot containers, then two API
    servers and a reconciler (host network, as on a machine of their own each)."""
    db_url = stack.enter_context(temporary_pg_database("docfence_containers"))
    mp = stack.enter_context(pytest.MonkeyPatch.context())
    use_dummy_aws(mp)
    # the judge opens the object store twice per job; one S3 client (~0.3 s to build each) serves them all
    mp.setattr(fault_runs, "open_blob_store", functools.cache(open_blob_store))
    endpoint = stack.enter_context(run_moto_server())
    boto3.client("s3", endpoint_url=endpoint, region_name=S3_REGION).create_bucket(Bucket=S3_BUCKET)
    stack.callback(podman.remove_all)  # the containers go first, then the S3 server and the database
    storage_url = f"s3://{S3_BUCKET}/objects?endpoint_url={endpoint}&region={S3_REGION}"
    podman.env.update(_scale_out_env(db_url, storage_url))
    shared = tmp_path / "secrets"  # made by the first process that needs it, read by all
    shared.mkdir(mode=0o700)
    os.chown(shared, IMAGE_UID, IMAGE_UID)
    podman.options += ["--network=host", "-v", f"{shared}:{SECRETS_MOUNT}"]
    started = monotonic()
    podman.once("db", "upgrade")
    figures["db_upgrade_s"] = round(monotonic() - started, 2)
    key = _key(podman, ())
    urls = []
    for i in (1, 2):
        port, since = free_port(), monotonic()
        podman.start(f"serve{i}", "serve", "--host", "127.0.0.1", "--port", str(port))
        urls.append(f"http://127.0.0.1:{port}")
        figures[f"serve{i}"] = _wait_ready(podman, f"serve{i}", urls[-1], since)
    podman.start("reconcile", "reconcile")
    faults = tmp_path / "faults"
    faults.mkdir()
    faults.chmod(0o777)  # the container's docfence user writes its barrier arrivals here
    return ScaleOut(db_url, storage_url, tuple(urls), key, faults, shared)


def _worker(podman: Podman, role: str, deployed: ScaleOut, *, killed_mid_job: bool = False) -> None:
    options = ["--hostname", role]  # the hostname starts its worker id (the lease owner)
    if killed_mid_job:  # blocks at the barrier holding its first job's lease, until it is killed
        options += ["-v", f"{deployed.faults}:/faults", "-e", f"DOCFENCE_FAULTS={KILL_POINT}=wait:never",
                    "-e", "DOCFENCE_FAULTS_DIR=/faults"]
    podman.start(role, "worker", "--no-reconcile", options=options)


def _succeeded(rows: Rows) -> int:
    """How many jobs succeeded; AssertionError as soon as one did not (no wait runs out on a broken build)."""
    jobs = rows.jobs().values()
    failed = {job.id: job.error_code for job in jobs if job.state in TERMINAL and job.state != "succeeded"}
    assert not failed, failed
    return sum(job.state == "succeeded" for job in jobs)


def test_scale_out_every_job_succeeds_once_with_a_worker_killed_mid_job(
    podman: Podman, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    figures: dict[str, Any] = {}
    test_start = monotonic()
    with ExitStack() as stack:
        deployed = _deploy(podman, stack, tmp_path, figures)
        rows = Rows(deployed.db_url)
        figures["deploy_s"] = round(monotonic() - test_start, 2)
        clients = [stack.enter_context(DocfenceClient(url, deployed.key)) for url in deployed.api_urls]
        started = monotonic()
        _worker(podman, "w1", deployed, killed_mid_job=True)
        ids = [clients[i % 2].submit((f"doc-{i}.pdf", links())).id for i in range(SCALE_JOBS)]
        barrier = deployed.faults / f"reached-{KILL_POINT}"
        wait_for(lambda: _succeeded(rows) >= 0 and barrier.exists(), JOBS_GUARD_S,
                 "w1 to hold a job at the barrier")  # (_succeeded raises as soon as a job failed)
        held = [job for job in rows.jobs().values() if job.state == "rendering"]
        assert len(held) == 1, held
        _worker(podman, "w2", deployed)
        # only w2 can finish jobs while w1 holds its one: both workers hold leases at once
        wait_for(lambda: _succeeded(rows) >= 10, JOBS_GUARD_S, "w2 to finish ten jobs")
        outside = _outside_view(deployed, tmp_path)
        assert stale_staged(outside, [held[0].id]), "w1 holds its job after uploading its output"
        podman("kill", podman.name("w1"))  # SIGKILL: the worker, its zygote and render process die at once
        wait_for(lambda: _succeeded(rows) == SCALE_JOBS, JOBS_GUARD_S, "every job to succeed")
        figures["jobs_s"] = round(monotonic() - started, 2)  # w1 started .. 50 succeeded, the kill included
        judged = monotonic()
        _assert_each_succeeded_once(outside, ids, killed=held[0].id)
        figures["judge_s"] = round(monotonic() - judged, 2)
    _report(capsys, {"scale_out": figures})


def _outside_view(deployed: ScaleOut, root: Path) -> Cluster:
    """The deployment as the fault harness's judge sees it: its database, object store and first API."""
    kek = {"DOCFENCE_KEK_FILE": str(deployed.secrets / "kek.key")}  # the judge reads the stored objects
    return Cluster(root, deployed.db_url, deployed.storage_url, extra_env=kek, base_url=deployed.api_urls[0],
                   api_key=deployed.key)


def _assert_each_succeeded_once(cluster: Cluster, ids: list[str], *, killed: str) -> None:
    """Every accepted job succeeded with one commit of its winning attempt (the sha256 of the API, the
    database, the stored object and the download agree); the killed worker's job was rescued by its lease
    expiring, and what that worker had staged is removed, never published."""
    rows = Rows(cluster.db_url)
    jobs = rows.jobs()
    assert sorted(jobs) == sorted(ids) and len(ids) == SCALE_JOBS
    assert {j.state for j in jobs.values()} == {"succeeded"}, {j.id: j.error_code for j in jobs.values()}
    history = rows.attempts(killed)
    assert [(a["attempt"], a["worker"].split("-")[0]) for a in history] == [(1, "w1"), (2, "w2")], history
    assert [a["outcome"] for a in history] == ["lease_expired", "artifact_committed"], history
    assert all(job.attempt == 1 for job in jobs.values() if job.id != killed)
    verdict = judge(cluster, Verdict("scale_out_containers", "postgres"), ids)
    assert verdict.terminal == SCALE_JOBS and verdict.lost == 0, verdict.as_dict()
    assert verdict.stale_publishes == 0 and not verdict.problems, verdict.as_dict()  # one commit each
    wait_for(lambda: not stale_staged(cluster, [killed]), JOBS_GUARD_S,
             "the staging GC to remove w1's output")
