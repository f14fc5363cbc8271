"""The lease store as a worker reaches it, and the one owner of the API client behind it.

Why this module exists: a holder built from the environment, a pull-mode
claim and a pool's ``claim_any`` all may build their own Kubernetes API
client, and whoever ends up holding the lease must close it; a failed or
refused claim must close it at once. :class:`StoreScope` is that ownership,
in one place.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from leasehold.lease.leaseops import LeaseOperations


class StoreScope:
    """A lease store and, when it was built here, the API client it runs on.

    ``StoreScope(store)`` wraps a caller's store (never closed here);
    :meth:`open` builds a :class:`~leasehold.lease.store.LeaseStore` on
    :func:`~leasehold.lease.kubeclient.new_api_client` (``$KUBECONFIG`` or
    in-cluster) when given ``None``; :meth:`open_http` a standard-library
    client. :meth:`close` closes only a client built here (anything with a
    ``close()``), once.
    """

    def __init__(self, store: LeaseOperations, api_client: Any = None) -> None:
        self.store = store
        self._api_client = api_client

    @classmethod
    def open(cls, store: LeaseOperations | None = None) -> StoreScope:
        """Wrap ``store``, or build a store on a new API client when it is ``None``.

        Raises:
            kubernetes.config.ConfigException: no cluster configuration found.
        """
        if store is not None:
            return cls(store)
        # Imported here: the kubernetes client is for SDK users, not ``leasehold run``.
        from leasehold.lease.kubeclient import new_api_client
        from leasehold.lease.store import LeaseStore

        api_client = new_api_client()
        return cls(LeaseStore(api_client), api_client)

    @classmethod
    def open_http(cls) -> StoreScope:
        """A scope owning a standard-library client (``leasehold run``): an ``HttpLeaseClient``.

        Same cluster as :meth:`open` finds, same lease writes, without the
        ``kubernetes`` package (it starts in a fraction of the time).

        Raises:
            leasehold.lease.httpclient.ClusterConfigError: no cluster configuration found.
        """
        from leasehold.lease.httpclient import HttpLeaseClient

        client = HttpLeaseClient.from_environment()
        return cls(client, client)

    def close(self) -> None:
        """Close the API client built here, if any (idempotent)."""
        api_client, self._api_client = self._api_client, None
        if api_client is not None:
            api_client.close()

    @contextmanager
    def closed_on_error(self) -> Iterator[LeaseOperations]:
        """Yield the store; close the scope if the block raises (nobody took it over)."""
        try:
            yield self.store
        except BaseException:
            self.close()
            raise
