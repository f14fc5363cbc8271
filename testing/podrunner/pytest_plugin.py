"""Pytest fixtures that run pods on the local control plane.

Register with ``-p podrunner.pytest_plugin`` (or in ``pytest_plugins``), next
to ``localcluster.pytest_plugin``, whose ``kubeconfig`` fixture this uses.
Fixtures:

- ``pod_runner`` (session): a `PodRunner` playing the kubelet of node
  ``local-node`` for the whole session, its work directory under pytest's
  temp folders; stopped (its processes killed) at the end. With
  ``LEASEHOLD_TEST_KUBECONFIG`` set, the cluster under test has real
  kubelets, so no runner starts and the fixture gives None: tests that only
  need pods to run work either way.
- ``local_pod_runner`` (session): the same runner, for tests that must
  reach into pod processes (pause with SIGSTOP, kill, read the pid or the
  log file). Against a real cluster those tests cannot work, and this
  fixture fails them with a message that says so; it never skips them. A
  test that takes ``pod_runner`` instead must do the same check itself::

      if pod_runner is None:
          pytest.fail("this test pauses a worker process, which needs the local pod runner")
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.config import ConfigException

from podrunner.kube import KubeError
from podrunner.runner import DEFAULT_NODE, PodRunner

KUBECONFIG_ENV = "LEASEHOLD_TEST_KUBECONFIG"
"""Set to a real cluster's kubeconfig to test against it (see localcluster.pytest_plugin)."""


@pytest.fixture(scope="session")
def pod_runner(
    kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PodRunner | None]:
    """Run a stand-in kubelet for the session, unless the cluster has real ones.

    Args:
        kubeconfig: The cluster's admin kubeconfig (``localcluster.pytest_plugin``).
        tmp_path_factory: Pytest's temp folders; pod logs stay there after the run.

    Yields:
        The started runner (node ``local-node``), or None when
        ``LEASEHOLD_TEST_KUBECONFIG`` names a real cluster.
    """
    if os.environ.get(KUBECONFIG_ENV):
        yield None
        return
    logging.getLogger("podrunner").setLevel(logging.INFO)
    runner = PodRunner(kubeconfig, tmp_path_factory.mktemp("podrunner"), DEFAULT_NODE)
    try:
        runner.start()
    except (KubeError, ConfigException, OSError) as exc:
        pytest.fail(f"the pod runner did not start: {exc}", pytrace=False)
    try:
        yield runner
    finally:
        runner.stop()


@pytest.fixture(scope="session")
def local_pod_runner(pod_runner: PodRunner | None) -> PodRunner:
    """Give the session's pod runner, failing the test when there is none.

    Args:
        pod_runner: The session's runner, or None against a real cluster.

    Returns:
        The runner.
    """
    if pod_runner is None:
        pytest.fail(
            f"this test controls pod processes directly (pause/kill/pid/log), which needs "
            f"the local pod runner; it cannot run against the real cluster in "
            f"{KUBECONFIG_ENV}={os.environ.get(KUBECONFIG_ENV)}",
            pytrace=False,
        )
    return pod_runner
