"""Pytest fixtures for tests that need a real Kubernetes API server.

Register with ``pytest_plugins = ["localcluster.pytest_plugin"]`` or
``-p localcluster.pytest_plugin``. Fixtures:

- ``kubeconfig`` (session): the cluster to test against. With
  ``LEASEHOLD_TEST_KUBECONFIG`` set to a kubeconfig file, that cluster (kind,
  a cluster from ``python -m localcluster up``, ...); otherwise a
  `LocalCluster` started for the session in a temp folder and stopped at its
  end. A cluster that cannot start (three tries, on fresh ports each) fails
  the tests; it never skips them. Under pytest-xdist each worker starts its
  own cluster (its own ports and temp folder), as the other session fixtures
  (pod runner, PostgreSQL) do.
- ``local_cluster`` (session): that `LocalCluster` itself, for tests that
  change the control plane (e.g. add a second API server); such a test fails
  against a ``LEASEHOLD_TEST_KUBECONFIG`` cluster.
- ``kubectl`` (session): a `Kubectl` bound to that kubeconfig.
- ``namespace`` (function): a fresh namespace named after the test, deleted
  afterwards without waiting.

This module imports nothing from ``leasehold``: it tests the cluster, not
the operator.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.binaries import tools_bin_dir
from localcluster.cluster import LocalCluster
from localcluster.errors import ComponentError, LocalClusterError
from localcluster.kubectl import Kubectl, KubectlError

KUBECONFIG_ENV = "LEASEHOLD_TEST_KUBECONFIG"
NAMESPACE_LABEL = "leasehold.dev/test-namespace"
_NAME_LIMIT = 63
_SUFFIX_LENGTH = 6  # "-" and five random characters, as generateName adds
_START_ATTEMPTS = 3


def namespace_name(test_name: str, suffix: str = "") -> str:
    """Turn a test name into a valid namespace name (RFC 1123 label).

    Args:
        test_name: The test's name, e.g. ``test_gc[configmap]``.
        suffix: Appended after a dash, to keep names unique across runs.

    Returns:
        Lowercase letters, digits and dashes, at most 63 characters, starting
        and ending with a letter or digit.
    """
    base = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-") or "test"
    room = _NAME_LIMIT - (len(suffix) + 1 if suffix else 0)
    base = base[:room].rstrip("-") or "t"
    return f"{base}-{suffix}" if suffix else base


@pytest.fixture(scope="session")
def _session_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster | None]:
    """The session's `LocalCluster`, or None when ``LEASEHOLD_TEST_KUBECONFIG`` names a cluster."""
    if os.environ.get(KUBECONFIG_ENV):
        yield None
        return
    for attempt in range(1, _START_ATTEMPTS + 1):
        cluster = LocalCluster(tmp_path_factory.mktemp("localcluster"), stop_with_parent=True)
        try:
            cluster.start()
            break
        except (LocalClusterError, OSError) as exc:
            # A component that failed most likely lost a port picked free to
            # another process before binding it (parallel workers pick ports at
            # the same moment): try again on fresh ports, in a fresh folder.
            if not isinstance(exc, ComponentError) or attempt == _START_ATTEMPTS:
                pytest.fail(f"the local control plane did not start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kubeconfig(_session_cluster: LocalCluster | None) -> Path:
    """Give the kubeconfig of the cluster under test, starting one if needed.

    The local cluster's work directory (logs included) stays in pytest's
    temp folders after the run.

    Returns:
        Path of an admin kubeconfig.
    """
    if _session_cluster is not None:
        return _session_cluster.kubeconfig
    given = os.environ[KUBECONFIG_ENV]
    path = Path(given).expanduser()
    if not path.is_file():
        pytest.fail(f"{KUBECONFIG_ENV}={given} does not name a kubeconfig file", pytrace=False)
    return path


@pytest.fixture(scope="session")
def local_cluster(_session_cluster: LocalCluster | None) -> LocalCluster:
    """Give the session's `LocalCluster`, for tests that change the control plane itself.

    Such a test fails (it does not skip) against a cluster named by
    ``LEASEHOLD_TEST_KUBECONFIG``: it cannot add or stop that cluster's
    components.

    Returns:
        The running local cluster.
    """
    if _session_cluster is None:
        pytest.fail(
            f"this test changes the control plane; it needs the local one"
            f" ({KUBECONFIG_ENV} is set)",
            pytrace=False,
        )
    return _session_cluster


@pytest.fixture(scope="session")
def kubectl(kubeconfig: Path) -> Kubectl:
    """Give a kubectl runner bound to the cluster under test.

    The binary is the static kubectl from ``hack/tools.sh``.

    Args:
        kubeconfig: The cluster's kubeconfig.

    Returns:
        The runner; call it like ``kubectl("get", "pods", "-n", ns)``.
    """
    try:
        bin_dir = tools_bin_dir()
    except LocalClusterError as exc:
        pytest.fail(f"kubectl is not available: {exc}", pytrace=False)
    return Kubectl(bin_dir / "kubectl", kubeconfig)


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kubectl: Kubectl) -> Iterator[str]:
    """Create a namespace for one test and delete it afterwards.

    The name is the test's name made valid, cut to fit 63 characters with a
    random suffix, so a rerun does not collide with a namespace that is still
    terminating. The fixture waits for the namespace's ``default``
    service account, without which pods cannot be created.

    Args:
        request: The test's request, for its name.
        kubectl: The kubectl runner.

    Yields:
        The namespace name.
    """
    name = namespace_name(request.node.name, secrets.token_hex(3)[: _SUFFIX_LENGTH - 1])
    manifest = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {NAMESPACE_LABEL: "true"}},
    }
    kubectl("create", "-f", "-", input=json.dumps(manifest))
    try:
        kubectl(
            "wait",
            "--for=create",
            "serviceaccount/default",
            "-n",
            name,
            "--timeout=30s",
        )
    except KubectlError:
        kubectl("delete", "namespace", name, "--wait=false", check=False)
        raise
    yield name
    kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)
