"""The operator's long-lived machinery with state.

The work queue, the list-watch, the expiry clock and watch, the peering gate,
object caches, pod memory, own writes, per-job locks, deadline and TTL clocks.
Per-job state has an owner and a lifetime: it is dropped when its job is gone.
"""
