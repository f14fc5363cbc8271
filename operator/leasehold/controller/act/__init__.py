"""Actors: carry out what :mod:`leasehold.controller.plan` decided.

One actor per kind of job (single, indexed, schedule), plus the waits before a
new token and the reclaim. Each reads through the engines' caches, plans purely,
then writes through the lease store and :mod:`leasehold.controller.kube`.
"""
