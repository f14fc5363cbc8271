"""The operator: reconcile LeasedJobs, judge lease expiry, reclaim, run attempts.

Why this package exists: it is the one party that decides expiry and starts
attempts. Only :mod:`~leasehold.controller.handlers` imports Kopf; the
engines it drives (work queue, expiry timers, lease watch, peering gate,
service, pure reconcile planning) are plain modules, tested without Kopf.
Importing this package registers no Kopf handler; ``leasehold operator``
(:mod:`~leasehold.controller.main`) does that when it starts.

Its dependencies (Kopf, prometheus-client, pydantic-settings) come with the
``[operator]`` extra: ``pip install 'leasehold[operator]'``.
"""
