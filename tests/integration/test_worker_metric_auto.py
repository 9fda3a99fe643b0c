"""kclmp.workerMetric=AUTO on a real loopback IMDS (fleet/host_probe.py, aws/imds.py): a tiny
HTTP server on 127.0.0.1 answers the IMDSv2 token PUT and the identity-document GET as EC2
does; botocore's IMDS client is pointed at it with AWS_EC2_METADATA_SERVICE_ENDPOINT and
AWS_EC2_METADATA_DISABLED is lifted only inside each test (monkeypatch), so nothing can
reach 169.254.169.254. The host's /proc, cgroup and token paths are looked up under a
temporary root, so the case is EC2's whatever machine runs it."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kcl_mp.fleet.host_probe import worker_metric

TOKEN = "loopback-token"


class _Imds(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str | None]] = []

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self) -> None:  # noqa: N802 (http.server's name)
        self.seen.append(("PUT", self.path, self.headers.get("x-aws-ec2-metadata-token-ttl-seconds")))
        ok = self.path == "/latest/api/token"
        self._answer(200 if ok else 404, TOKEN.encode() if ok else b"")

    def do_GET(self) -> None:  # noqa: N802
        self.seen.append(("GET", self.path, self.headers.get("x-aws-ec2-metadata-token")))
        ok = self.path == "/latest/dynamic/instance-identity/document" \
            and self.headers.get("x-aws-ec2-metadata-token") == TOKEN
        self._answer(200 if ok else 401, b'{"instanceId": "i-0loopback", "region": "us-east-1"}' if ok else b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def imds(monkeypatch, tmp_path):
    """The loopback IMDS, botocore pointed at it, IMDS enabled for this test only; an EC2-like root."""
    _Imds.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Imds)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    for name in ("AWS_EC2_METADATA_DISABLED", "ECS_CONTAINER_METADATA_URI", "ECS_CONTAINER_METADATA_URI_V4"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}/")
    (tmp_path / "proc").mkdir()
    try:
        yield server, tmp_path
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_auto_is_cpu_where_the_identity_document_answers(imds) -> None:
    _, root = imds
    assert worker_metric("AUTO", root) == ("CPU", "EC2: the instance identity document answered")
    assert _Imds.seen == [("PUT", "/latest/api/token", "21600"),
                          ("GET", "/latest/dynamic/instance-identity/document", TOKEN)]


def test_explicit_values_ask_nothing(imds) -> None:
    _, root = imds
    assert worker_metric("DEFAULT", root) == ("DEFAULT", "set")
    assert worker_metric("CPU", root) == ("CPU", "set")
    assert _Imds.seen == []


def test_auto_is_default_when_imds_is_disabled(imds, monkeypatch) -> None:
    _, root = imds
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    metric, why = worker_metric("AUTO", root)
    assert (metric, "not on EC2, ECS or EKS" in why) == ("DEFAULT", True)
    assert _Imds.seen == []


def test_auto_is_default_within_seconds_when_nothing_answers(imds) -> None:
    server, root = imds
    server.shutdown()
    server.server_close()  # the port now refuses, as a host without IMDS
    started = time.monotonic()
    metric, why = worker_metric("AUTO", root)
    assert (metric, "not on EC2, ECS or EKS" in why) == ("DEFAULT", True)
    assert time.monotonic() - started < 3.0


def test_ecs_and_eks_come_first_and_ask_nothing(imds, monkeypatch) -> None:
    _, root = imds
    monkeypatch.setenv("ECS_CONTAINER_METADATA_URI_V4", "http://169.254.170.2/v4/task")
    assert worker_metric("AUTO", root)[0] == "CPU"
    monkeypatch.delenv("ECS_CONTAINER_METADATA_URI_V4")
    token = root / "var/run/secrets/kubernetes.io/serviceaccount/token"
    token.parent.mkdir(parents=True)
    token.write_text("t")
    assert worker_metric("AUTO", root)[0] == "DEFAULT"  # EKS without a cgroup: no provider, as Java
    (root / "sys/fs/cgroup").mkdir(parents=True)
    (root / "sys/fs/cgroup/cgroup.controllers").write_text("cpu memory")
    assert worker_metric("AUTO", root) == ("CPU", "EKS: /var/run/secrets/kubernetes.io/serviceaccount/token exists, "
                                                  "cgroup v2")
    assert _Imds.seen == []
