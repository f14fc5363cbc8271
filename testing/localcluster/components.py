"""Command lines of the four control plane components, as pure functions.

The flags follow what controller-runtime's envtest and kwokctl's binary
runtime pass, plus what a kubelet-less cluster needs to behave like a real
one: RBAC and the Node authorizer on, service-account tokens signed by our own
key, and a controller manager that runs every default controller under its
own service-account credentials (so RBAC denials show up here as they would
in production).
"""

from __future__ import annotations

from localcluster.kubeconfig import CLUSTER_NAME
from localcluster.layout import CONTROLLER_MANAGER, LOOPBACK, SCHEDULER, Layout, Ports

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
"""Service ClusterIPs; only configuration, since no traffic is routed here."""

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
"""Issuer of service-account tokens (``iss`` claim); also the default audience."""

ETCD_MEMBER = "leasehold"


def etcd_args(layout: Layout, ports: Ports) -> list[str]:
    """Return the etcd flags: one member on loopback, no fsync.

    ``--unsafe-no-fsync`` trades durability for speed, which is right for a
    cluster that lives as long as a test session.

    Args:
        layout: The cluster's paths.
        ports: The cluster's ports.

    Returns:
        Flags, without the binary.
    """
    client = f"http://{LOOPBACK}:{ports.etcd_client}"
    peer = f"http://{LOOPBACK}:{ports.etcd_peer}"
    return [
        f"--name={ETCD_MEMBER}",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster={ETCD_MEMBER}={peer}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def apiserver_args(layout: Layout, ports: Ports) -> list[str]:
    """Return the kube-apiserver flags.

    Admission plugins stay at their defaults (ValidatingAdmissionPolicy
    included); none of them needs a kubelet just to accept objects.

    Args:
        layout: The cluster's paths.
        ports: The cluster's ports.

    Returns:
        Flags, without the binary.
    """
    return [
        f"--advertise-address={LOOPBACK}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.apiserver}",
        f"--etcd-servers=http://{LOOPBACK}:{ports.etcd_client}",
        # Only used when no serving cert is given; keeps it out of /var/run.
        f"--cert-dir={layout.pki_dir}",
        f"--tls-cert-file={layout.apiserver_serving.cert}",
        f"--tls-private-key-file={layout.apiserver_serving.key}",
        f"--client-ca-file={layout.ca.cert}",
        "--authorization-mode=Node,RBAC",
        # On top of the default plugins: OpenShift enables this one, and under
        # it an ownerReference with blockOwnerDeletion needs `update` on the
        # owner's finalizers subresource (leasedjobs/finalizers).
        "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
        "--allow-privileged=true",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={layout.service_account.cert}",
        f"--service-account-signing-key-file={layout.service_account.key}",
        # The aggregation layer: how the API server vouches for users when it
        # proxies to extension servers. Without it, the controller manager and
        # the scheduler complain forever about a missing requestheader CA.
        f"--requestheader-client-ca-file={layout.front_proxy_ca.cert}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={layout.front_proxy_client.cert}",
        f"--proxy-client-key-file={layout.front_proxy_client.key}",
        # A loopback advertise address cannot go into the Endpoints of the
        # `kubernetes` service (validation rejects it), and no pod network
        # exists to route to it anyway.
        "--endpoint-reconciler-type=none",
    ]


def _secure_serving_args(layout: Layout, component: str, port: int) -> list[str]:
    kubeconfig = layout.component_kubeconfig(component)
    serving = layout.serving(component)
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={port}",
        f"--tls-cert-file={serving.cert}",
        f"--tls-private-key-file={serving.key}",
        "--leader-elect=false",
    ]


def controller_manager_args(layout: Layout, ports: Ports) -> list[str]:
    """Return the kube-controller-manager flags.

    ``--controllers=*`` is the default set: garbage collector, namespace,
    deployment, replicaset, job, service account, token publisher
    (``kube-root-ca.crt``), node lifecycle and the others. CSR signing uses
    the cluster CA, so a kubelet stand-in can get a certificate the usual way.

    Args:
        layout: The cluster's paths.
        ports: The cluster's ports.

    Returns:
        Flags, without the binary.
    """
    return [
        *_secure_serving_args(layout, CONTROLLER_MANAGER, ports.controller_manager),
        "--controllers=*",
        f"--cluster-name={CLUSTER_NAME}",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={layout.service_account.key}",
        f"--root-ca-file={layout.ca.cert}",
        f"--cluster-signing-cert-file={layout.ca.cert}",
        f"--cluster-signing-key-file={layout.ca.key}",
        f"--flex-volume-plugin-dir={layout.flexvolume_dir}",
    ]


def scheduler_args(layout: Layout, ports: Ports) -> list[str]:
    """Return the kube-scheduler flags.

    Args:
        layout: The cluster's paths.
        ports: The cluster's ports.

    Returns:
        Flags, without the binary.
    """
    return _secure_serving_args(layout, SCHEDULER, ports.scheduler)
