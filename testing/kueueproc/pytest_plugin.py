"""Pytest fixture for tests that need a real Kueue beside the local control plane.

Register with ``pytest_plugins = ["kueueproc.pytest_plugin"]`` (after
``localcluster.pytest_plugin``, whose ``kubeconfig`` and ``kubectl`` it
uses). Fixture:

- ``kueue`` (session): Kueue's CRDs applied and its manager running as a
  local process (:class:`~kueueproc.KueueProcess`: the external framework
  ``LeasedJob.v1alpha1.leasehold.dev``, no webhooks registered with the API
  server; see :mod:`kueueproc` for what that leaves out). It yields a
  :class:`Kueue` handle with the kubeconfig, an environment for child
  processes and helpers that create queues and priority classes. Kueue that
  cannot be built or started fails the tests; it never skips them. Under
  pytest-xdist each worker runs its own Kueue against its own cluster.

A failed test that used it shows the end of Kueue's log.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from kueueproc import (
    KueueError,
    KueueProcess,
    Queue,
    create_queue,
    create_workload_priority_class,
    install_crds,
)
from localcluster.kubectl import Kubectl

LOG_LINES_ON_FAILURE = 80
"""Lines of Kueue's log a failed test that used the ``kueue`` fixture shows."""


@dataclass(frozen=True)
class Kueue:
    """A running Kueue on the test cluster.

    Attributes:
        process: The manager process (``logs()``, ``stop()``).
        kubeconfig: The cluster's admin kubeconfig.
        kubectl: A kubectl runner bound to it.
    """

    process: KueueProcess
    kubeconfig: Path
    kubectl: Kubectl

    @property
    def env(self) -> dict[str, str]:
        """Return this process's environment with ``KUBECONFIG`` set to the cluster's."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def queue(
        self,
        namespace: str,
        quota: Mapping[str, str],
        *,
        name: str = "queue",
        preemption: Mapping[str, str] | None = None,
    ) -> Queue:
        """Create a ResourceFlavor, a ClusterQueue with ``quota`` and a LocalQueue in ``namespace``.

        See :func:`kueueproc.create_queue` for the arguments.

        Returns:
            The names made; label a job ``kueue.x-k8s.io/queue-name: <local_queue>``.
        """
        return create_queue(self.kubectl, namespace, quota, name=name, preemption=preemption)

    def priority_class(self, name: str, value: int) -> None:
        """Create a WorkloadPriorityClass ``name`` with priority ``value``."""
        create_workload_priority_class(self.kubectl, name, value)


@pytest.fixture(scope="session")
def kueue(
    kubeconfig: Path, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Kueue]:
    """Run Kueue's manager against the session's cluster.

    Args:
        kubeconfig: The cluster's kubeconfig.
        kubectl: A kubectl runner bound to it.
        tmp_path_factory: For the process's work folder.

    Yields:
        The :class:`Kueue` handle.
    """
    workdir = tmp_path_factory.mktemp("kueue")
    process = KueueProcess(kubeconfig, workdir, workdir / "kueue.log")
    try:
        install_crds(kubectl)
        kubectl("create", "namespace", "kueue-system", check=False)
        process.start()
    except KueueError as exc:
        pytest.fail(f"no Kueue for the tests: {exc}", pytrace=False)
    try:
        yield Kueue(process=process, kubeconfig=kubeconfig, kubectl=kubectl)
    finally:
        process.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Append the end of Kueue's log to the report of a failed test that used it."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.failed:
        return
    handle = getattr(item, "funcargs", {}).get("kueue")
    if isinstance(handle, Kueue):
        lines = handle.process.logs().splitlines()[-LOG_LINES_ON_FAILURE:]
        report.sections.append((f"Kueue log, last {len(lines)} lines", "\n".join(lines)))
