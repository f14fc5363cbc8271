"""The operator's Kubernetes edge (besides the lease store): pods, job objects, Events.

The only operator code that sees ``kubernetes.client.exceptions.ApiException``
(the list-watch aside): each call converts it once, into the outcome types of
its module or into :mod:`leasehold.lease.errors`, as :mod:`leasehold.lease.store`
does for leases.
"""

from typing import Final

REQUEST_TIMEOUT: Final = (10.0, 60.0)
"""Every call's ``_request_timeout``: (connect, read) seconds.

Without one, the client waits for ever on a connection that went silent (a
partition, an API server that froze): the reconcile holding that job's lock
would hang, and that job with it. The read limit is between bytes, not for the
whole answer, so a long LIST that keeps coming is not cut; the lease store
uses its own (``LeaseStore(request_timeout_seconds=...)``).
"""
