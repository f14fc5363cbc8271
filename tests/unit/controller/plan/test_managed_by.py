"""``spec.managedBy``: which LeasedJobs this operator leaves to another controller."""

from __future__ import annotations

from leasehold import names
from leasehold.controller.plan.managed_by import foreign_manager


def test_unset_or_leasehold_s_own_value_is_this_operator_s() -> None:
    assert foreign_manager({"spec": {}}) is None
    assert foreign_manager({}) is None
    assert foreign_manager({"spec": {"managedBy": names.MANAGED_BY_LEASEHOLD}}) is None


def test_any_other_value_is_another_controller_s() -> None:
    assert foreign_manager({"spec": {"managedBy": "kueue.x-k8s.io/multikueue"}}) == (
        "kueue.x-k8s.io/multikueue"
    )
    # batch/v1's own job controller is not leasehold's either.
    assert foreign_manager({"spec": {"managedBy": "kubernetes.io/job-controller"}}) == (
        "kubernetes.io/job-controller"
    )
