"""Test tooling: Jepsen-style chaos runs of leasehold on a local control plane (see ``run``)."""
