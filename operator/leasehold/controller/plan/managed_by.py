"""Which controller reconciles a LeasedJob: ``spec.managedBy``, as batch/v1 Job's.

Why this module exists: a LeasedJob whose ``spec.managedBy`` names another
controller (MultiKueue's ``kueue.x-k8s.io/multikueue``, say) is that
controller's to run and to report on; this operator must leave it alone
entirely: no lease, no pod, no status, no Event. The job controller of
Kubernetes skips such Jobs the same way (``pkg/controller/job/job_controller.go``,
``isManagedByForeignController``). The check reads the raw body, before the
job is validated, so even a job this operator could not parse is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from leasehold import names


def foreign_manager(body: Mapping[str, Any]) -> str | None:
    """The controller that manages a LeasedJob, when it is not this operator.

    Args:
        body: the LeasedJob as the API serves it (camelCase).

    Returns:
        ``spec.managedBy`` when it is set to anything but
        :data:`~leasehold.names.MANAGED_BY_LEASEHOLD`; ``None`` when this
        operator reconciles the job (unset, or its own value).
    """
    manager = (body.get("spec") or {}).get("managedBy")
    if manager is None or manager == names.MANAGED_BY_LEASEHOLD:
        return None
    return str(manager)
