"""Benchmarks of leasehold against a real local control plane (``bench/bench.py``)."""
