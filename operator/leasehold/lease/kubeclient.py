"""Build a Kubernetes API client the way a worker finds its cluster.

Why this module exists: the worker SDK and ``leasehold run`` must reach the
API server from inside a pod (the pod's service account) and from outside one
(tests, the local process runner, a developer's shell), without each caller
repeating the choice. Only the client is built here; every lease operation
goes through :mod:`leasehold.lease.store`.
"""

from __future__ import annotations

import os

from kubernetes import client, config

KUBECONFIG_ENV = "KUBECONFIG"


def new_api_client(
    kubeconfig: str | os.PathLike[str] | None = None, *, pool_size: int | None = None
) -> client.ApiClient:
    """Build an API client from a kubeconfig if one is named, else in-cluster.

    The order: ``kubeconfig``; else ``$KUBECONFIG`` (a ``:``-separated list is
    merged, as kubectl does); else the pod's service account. ``~/.kube/config``
    is never used implicitly: a worker outside a pod must say which cluster it
    works for. The kubeconfig is only read (no token refresh is persisted).
    ``pool_size`` is the HTTP connections kept to the API server (``None``: the
    client's 4); size it to the threads that share the client.

    Returns:
        A new ``kubernetes.client.ApiClient``; the caller owns and closes it.

    Raises:
        kubernetes.config.ConfigException: the kubeconfig is missing or
            invalid, or (without one) the process is not in a pod.
    """
    path = os.fspath(kubeconfig) if kubeconfig is not None else os.environ.get(KUBECONFIG_ENV)
    configuration = client.Configuration()
    if path:
        config.load_kube_config(
            config_file=path, client_configuration=configuration, persist_config=False
        )
    else:
        config.load_incluster_config(client_configuration=configuration)
    if pool_size is not None:
        configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)
