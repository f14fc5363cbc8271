"""Errors of the local control plane, sorted by what the caller should do.

A `BuildError` means the binaries are missing or could not be built: fix the
toolchain or the cache, then try again. A `ComponentError` means one named
process did not come up; its message carries the tail of that process's log
so that a failed test run explains itself without a second look at the disk.
"""

from __future__ import annotations

from pathlib import Path


class LocalClusterError(Exception):
    """Base class of every error the local control plane raises."""


class BuildError(LocalClusterError):
    """The control plane binaries or the client tools could not be provided."""


class StateError(LocalClusterError):
    """The work directory holds a cluster in a state that forbids the request.

    For example, `up` on a work directory where a cluster still runs in part.
    """


class ComponentError(LocalClusterError):
    """One component of the control plane failed to start or to become healthy.

    Attributes:
        component: Name of the failed component, e.g. ``kube-apiserver``.
        reason: Short description of what went wrong.
        log_path: Log file of the component, if it was started.
        log_tail: Last lines of that log, possibly empty.
    """

    def __init__(
        self,
        component: str,
        reason: str,
        log_path: Path | None = None,
        log_tail: str = "",
    ) -> None:
        self.component = component
        self.reason = reason
        self.log_path = log_path
        self.log_tail = log_tail
        message = f"{component} failed: {reason}"
        if log_path is not None:
            message += (
                f"\n--- last lines of {log_path} ---\n{log_tail.rstrip() or '(log is empty)'}"
            )
        super().__init__(message)
