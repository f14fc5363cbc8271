"""The test harness's operator process starts on fresh ports when one it was given is taken.

CI once lost a run to this: the operator's liveness port was taken between the
pick and the bind, the operator exited with "address already in use", and the
process that held the port answered ``/healthz``, so the test went on without
an operator.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import operatorproc
import ports
from operatorproc import OperatorProcess


class _AnyPath(http.server.BaseHTTPRequestHandler):
    """Answers every path with 200 and plain text, as a metrics server does."""

    def do_GET(self) -> None:
        body = b"# a metrics server\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def squatter() -> Iterator[int]:
    """An HTTP server on a port from `ports.free_port`, answering ``/healthz`` with text."""
    server = http.server.HTTPServer(("127.0.0.1", ports.free_port()), _AnyPath)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def test_an_operator_given_a_taken_liveness_port_starts_again_on_a_fresh_one(
    crds_installed: Path,
    namespace: str,
    tmp_path: Path,
    worker_rbac: None,
    squatter: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proc = OperatorProcess(crds_installed, namespace, tmp_path / "operator.log")
    handed_out = iter([squatter])
    fresh = ports.free_port
    monkeypatch.setattr(operatorproc, "free_port", lambda: next(handed_out, None) or fresh())
    try:
        proc.start()
        assert proc.proc is not None
        assert proc.proc.poll() is None, proc.logs()
        log = proc.logs()
        assert "address already in use" in log
        assert "a port was taken: starting again on fresh ports" in log
        assert proc.metrics()  # its metrics answer on the port it has now
    finally:
        proc.stop()
