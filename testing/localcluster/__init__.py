"""Test tooling: a real, local Kubernetes control plane for tests and demos.

No Docker runs on the project's machines, so kind cannot start here. This
package runs etcd, kube-apiserver, kube-controller-manager and kube-scheduler
as local processes instead (as controller-runtime's envtest and kwokctl's
binary runtime do), from binaries built by ``hack/controlplane/build.sh``.
There is no kubelet.

From Python::

    from localcluster import LocalCluster

    with LocalCluster(Path("/tmp/cluster")) as cluster:
        print(cluster.kubeconfig)

From a shell: ``python -m localcluster up`` (see ``--help``). From pytest:
the fixtures in `localcluster.pytest_plugin`.

The package needs the standard library and ``cryptography`` only.
"""

from localcluster.binaries import control_plane_bin_dir, tools_bin_dir
from localcluster.cluster import LocalCluster
from localcluster.errors import BuildError, ComponentError, LocalClusterError, StateError
from localcluster.kubectl import Kubectl, KubectlError

__all__ = [
    "BuildError",
    "ComponentError",
    "Kubectl",
    "KubectlError",
    "LocalCluster",
    "LocalClusterError",
    "StateError",
    "control_plane_bin_dir",
    "tools_bin_dir",
]
