"""Test tooling: ``leasehold operator`` as a real process, for tests and the demo.

It stands in for the operator's Deployment on the local control plane, so it
lives outside the ``leasehold`` package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from ports import free_port

BIND_TRIES = 3
"""How many times `OperatorProcess.start` starts it when a port it was given is taken."""


class _PortTakenError(Exception):
    """The operator exited at start-up because a port it was given was taken."""


def _kopf_answers(port: int) -> bool:
    """Whether Kopf's liveness endpoint answers on ``port``.

    Kopf answers with a JSON object; whatever else may listen there (a metrics
    server answers any path) does not.
    """
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
            return isinstance(json.loads(response.read()), dict)
    except (OSError, ValueError):
        return False


class OperatorProcess:
    """``leasehold operator`` as a real process, watching one namespace.

    Args:
        kubeconfig: the cluster's kubeconfig.
        namespace: the namespace to watch.
        log_path: where its output goes.
        margin_seconds: the expiry margin.
        peering: run with Kopf peering under this name (HA), or standalone.
        priority: this replica's peering priority.
        env: extra environment (e.g. libfaketime's, to skew its clock).
        start_timeout_seconds: how long :meth:`start` waits for liveness (roomy: on a
            loaded machine, or beside parallel test workers, start-up takes many
            seconds; a CI rehearsal saw over 90 s).
    """

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        log_path: Path,
        margin_seconds: float = 1.0,
        *,
        peering: str | None = None,
        priority: int = 0,
        env: dict[str, str] | None = None,
        start_timeout_seconds: float = 180.0,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.start_timeout_seconds = start_timeout_seconds
        self.namespace = namespace
        self.log_path = log_path
        self.margin_seconds = margin_seconds
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_port = free_port()
        self.peering = peering
        self.priority = priority
        self.env = dict(env or {})

    def start(self) -> None:
        """Start it and wait until its liveness endpoint answers.

        Its ports come from `ports.free_port`. Should one be taken all the same
        (by something outside the tests) and the operator exit with "address
        already in use", it is started again on fresh ports, up to
        ``BIND_TRIES`` times.

        Raises:
            RuntimeError: it exited, or was not live within ``start_timeout_seconds``
                (it is then stopped first).
        """
        for attempt in range(1, BIND_TRIES + 1):
            try:
                self._start_once()
                return
            except _PortTakenError:
                if attempt == BIND_TRIES:
                    raise RuntimeError(
                        f"operator could not bind a port in {BIND_TRIES} tries:\n{self.logs()}"
                    ) from None
                with self.log_path.open("a") as log:
                    log.write("--- a port was taken: starting again on fresh ports\n")
                self.metrics_port = free_port()

    def _start_once(self) -> None:
        port = free_port()
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), **self.env}
        start_of_log = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                str(Path(sys.prefix) / "bin" / "leasehold"),
                "operator",
                "--namespace",
                self.namespace,
                "--expiry-margin-seconds",
                str(self.margin_seconds),
                "--liveness-endpoint",
                f"http://127.0.0.1:{port}/healthz",
                "--metrics-port",
                str(self.metrics_port),
                *(
                    ["--peering", self.peering, "--priority", str(self.priority)]
                    if self.peering
                    else []
                ),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.monotonic() + self.start_timeout_seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if "address already in use" in self.logs()[start_of_log:]:
                    raise _PortTakenError
                raise RuntimeError(f"operator exited with {self.proc.returncode}:\n{self.logs()}")
            if _kopf_answers(port) and self.proc.poll() is None:
                return
            time.sleep(0.2)
        # Not live in time: stop it, so a failed start leaves no operator
        # behind to act on the next test's objects.
        self.stop()
        raise RuntimeError(
            f"operator did not become live in {self.start_timeout_seconds:g} s:\n{self.logs()}"
        )

    def metrics(self) -> dict[str, float]:
        """Scrape its ``/metrics``: ``{"name{labels}": value}`` (no comments)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        samples: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self) -> None:
        """SIGKILL it (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def logs(self) -> str:
        """Everything it printed so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
