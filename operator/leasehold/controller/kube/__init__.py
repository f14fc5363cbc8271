"""The operator's Kubernetes edge (besides the lease store): pods, job objects, Events.

The only operator code that sees ``kubernetes.client.exceptions.ApiException``
(the list-watch aside): each call converts it once, into the outcome types of
its module or into :mod:`leasehold.lease.errors`, as :mod:`leasehold.lease.store`
does for leases.
"""
