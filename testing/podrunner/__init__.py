"""Test tooling: a stand-in kubelet for the local control plane; pods run as local processes.

The local control plane (`localcluster`) has no kubelet and no container
runtime, so pods stay Pending there. `PodRunner` plays the kubelet of one
node: it registers a Node and keeps it Ready (status heartbeats and a Lease in
``kube-node-lease``), so the real kube-scheduler binds pods to it; it runs the
first container's ``command + args`` of each such pod as a local process
(the image is ignored) with the pod's env and a service-account token bound
to the pod; and it writes the pod status as the process runs and exits.
Because the "containers" are plain processes, tests can pause (SIGSTOP),
resume and kill them, which is the point.

From Python::

    from podrunner import PodRunner

    with PodRunner(kubeconfig, Path("/tmp/runner")) as runner:
        pid = runner.wait_for_pid("default", "my-pod")

From a shell: ``python -m podrunner --kubeconfig K --workdir D`` (see
``--help``). From pytest: the fixtures in `podrunner.pytest_plugin`.

What differs from a kubelet: only the first container runs (init and other
containers are ignored with a warning); every restart policy is treated as
``Never``; volumes, probes, resource limits and ``activeDeadlineSeconds`` are
ignored; a pod that cannot start (no ``command``, a missing ConfigMap) turns
Failed at once instead of waiting; there is no kubelet API, so ``kubectl
logs``/``exec`` do not work (read ``<workdir>/pods/<ns>_<name>_<uid>/log`` or
`PodRunner.log`). Grace periods are capped at 30 s.
"""

from podrunner.identity import SERVICEACCOUNT_DIR_ENV
from podrunner.kube import Kube, KubeError
from podrunner.node import CAPACITY, LEASE_NAMESPACE
from podrunner.podspec import PodSetupError, expand
from podrunner.runner import (
    DEFAULT_NODE,
    PodNotRunningError,
    PodRunner,
    find_pod_dir,
    read_pid,
)

__all__ = [
    "CAPACITY",
    "DEFAULT_NODE",
    "LEASE_NAMESPACE",
    "SERVICEACCOUNT_DIR_ENV",
    "Kube",
    "KubeError",
    "PodNotRunningError",
    "PodRunner",
    "PodSetupError",
    "expand",
    "find_pod_dir",
    "read_pid",
]
