"""Kopf tuned as the operator tunes it, with one empty JobLease event handler: Kopf's floor.

Why this script exists: it measures what Kopf itself costs per watch event
(the reason the operator watches JobLeases outside Kopf). So that it
cannot drift from the operator, Kopf is tuned by the operator's own startup
handler (:func:`leasehold.controller.handlers.configure`) from an
:class:`~leasehold.controller.settings.OperatorSettings`, with a runtime
that starts nothing: no lease watch, no expiry timers, no metrics server.
The handlers run from a registry of their own, so the operator's other
handlers (LeasedJobs, cleanup) are not registered here.

Usage: ``kopf_floor.py KUBECONFIG NAMESPACE``; runs until SIGTERM.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf

from leasehold import names
from leasehold.controller import handlers
from leasehold.controller.settings import OperatorSettings


@dataclass
class IdleRuntime:
    """What the operator's startup and cleanup handlers use of its runtime, doing nothing.

    Attributes:
        settings: the operator's settings the handlers read.
        tasks: the engines' tasks (none).
        watches: the lease watches (none).
    """

    settings: OperatorSettings
    tasks: list[Any] = field(default_factory=list)
    watches: list[Any] = field(default_factory=list)

    async def start(self) -> None:
        """Start no engine: the floor measures Kopf alone."""


async def job_lease_event(**_: Any) -> None:
    """Do nothing with a JobLease event (Kopf's own per-event work is the figure)."""


def main(argv: Sequence[str]) -> int:
    """Run Kopf until SIGTERM; ``argv`` as in the module's usage."""
    kubeconfig, namespace = argv[1:3]
    os.environ["KUBECONFIG"] = kubeconfig  # Kopf's login reads it
    settings = OperatorSettings(namespaces=[namespace], metrics_port=0, liveness_endpoint="")
    registry = kopf.OperatorRegistry()  # Kopf's default one also holds the operator's handlers
    kopf.on.login(registry=registry)(kopf.login_via_client)  # as the default one does
    kopf.on.startup(registry=registry)(handlers.configure)
    kopf.on.event(names.GROUP, names.VERSION, names.PLURAL_JOB_LEASES, registry=registry)(
        job_lease_event
    )
    kopf.configure(quiet=True)  # as ``kopf run -q``
    kopf.run(
        registry=registry,
        standalone=settings.standalone,
        namespaces=settings.namespaces,
        memo=kopf.Memo(runtime=IdleRuntime(settings)),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
