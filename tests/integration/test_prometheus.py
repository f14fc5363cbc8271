"""A real Prometheus server scrapes the operator; PromQL sees the run's claims."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from operatorproc import OperatorProcess
from podrunner import PodRunner
from ports import free_port
from tests.integration.jobs import create_job, phase_is, run, wait_for


class Prometheus:
    """A Prometheus server (Debian's package) scraping one target every second."""

    def __init__(self, workdir: Path, target: str) -> None:
        self.port = free_port()
        config = workdir / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: leasehold-operator\n"
            f"    static_configs: [{{targets: ['{target}']}}]\n"
        )
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus not found: apt-get install prometheus (Debian's package)")
        self.log = (workdir / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Run an instant query; returns the result vector."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": promql}
        )
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def ready(self) -> bool:
        """Whether the server answers /-/ready."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the server."""
        self.proc.terminate()
        self.proc.wait(timeout=20)
        self.log.close()


@pytest.fixture
def prometheus(operator: OperatorProcess, tmp_path: Path) -> Iterator[Prometheus]:
    server = Prometheus(tmp_path, f"127.0.0.1:{operator.metrics_port}")
    try:
        wait_for("Prometheus ready", server.ready, 30)
        yield server
    finally:
        server.stop()


def test_prometheus_scrapes_the_claim_count_of_a_finished_run(
    prometheus: Prometheus,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    for name in ("one", "two"):
        create_job(api_client, namespace, name, run(0.2))
    for name in ("one", "two"):
        wait_for("Succeeded", phase_is(api_client, namespace, name, "Succeeded"), 60)

    def claims() -> float | None:
        result = prometheus.query('leasehold_claims_total{job="leasehold-operator"}')
        if not result:
            return None
        value = float(result[0]["value"][1])
        return value if value >= 2 else None

    assert wait_for("the claims to be scraped", claims, 30) == 2
    succeeded = prometheus.query('leasehold_jobs{phase="Succeeded"}')
    wait_for(
        "jobs gauge",
        lambda: float(prometheus.query('leasehold_jobs{phase="Succeeded"}')[0]["value"][1]) == 2,
        15,
    )
    assert succeeded
