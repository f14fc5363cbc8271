"""When a holder renews and when it must stop: pure arithmetic on one monotonic clock.

Why counted this way: the operator calls a lease expired when it saw no
change for ``duration + margin`` on its own monotonic clock, counted from
when it *saw* the change. A renewal request starts before the operator can
see its result, so a worker deadline counted on the worker's monotonic clock
from the **start** of its last successful renew request, minus a margin,
always ends first::

    request start ─┬─ API server writes ─┬─ operator sees it ─ ... ─ operator's expiry
                   │                     │
                   └── worker deadline = start + duration - margin (earlier)

No wall clock of any machine is compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

DEFAULT_RENEW_FRACTION: Final = 1 / 3
"""Renew every third of the lease duration: two renewals can fail in a row."""

MIN_REQUEST_TIMEOUT_SECONDS: Final = 1.0
"""No renew request is given less than this (unless the deadline is nearer): a
slow but healthy API server must still be able to answer."""


def default_margin_seconds(duration_seconds: float) -> float:
    """Return the default safety margin (seconds) for a lease of ``duration_seconds``.

    ``max(1 s, 20 % of the duration)``, but at most half the duration, so a
    short lease keeps a usable window.
    """
    return min(max(1.0, 0.2 * duration_seconds), 0.5 * duration_seconds)


@dataclass(frozen=True)
class LeaseTiming:
    """When a holder renews and how long a successful renewal lets it work (all seconds).

    Attributes:
        duration_seconds: the lease duration.
        renew_interval_seconds: time between the starts of two renewals.
        margin_seconds: how much earlier than ``duration`` after a renewal
            started the holder gives up.
    """

    duration_seconds: float
    renew_interval_seconds: float
    margin_seconds: float

    @classmethod
    def for_duration(
        cls,
        duration_seconds: float,
        *,
        renew_fraction: float = DEFAULT_RENEW_FRACTION,
        margin_seconds: float | None = None,
    ) -> LeaseTiming:
        """Derive the timing of a lease: renew every ``renew_fraction * duration``.

        ``margin_seconds`` defaults to :func:`default_margin_seconds`.

        Raises:
            ValueError: the values leave no time to renew before the deadline
                (the interval must be shorter than ``duration - margin``).
        """
        if not duration_seconds > 0:
            raise ValueError(f"duration_seconds must be > 0, got {duration_seconds}")
        if not 0 < renew_fraction < 1:
            raise ValueError(f"renew_fraction must be in (0, 1), got {renew_fraction}")
        margin = (
            default_margin_seconds(duration_seconds) if margin_seconds is None else margin_seconds
        )
        if not 0 <= margin < duration_seconds:
            raise ValueError(f"margin_seconds must be in [0, {duration_seconds}), got {margin}")
        interval = renew_fraction * duration_seconds
        if interval >= duration_seconds - margin:
            raise ValueError(
                f"renewing every {interval:.3g} s leaves no time before the deadline"
                f" ({duration_seconds:.3g} s duration - {margin:.3g} s margin)"
            )
        return cls(duration_seconds, interval, margin)

    @property
    def window_seconds(self) -> float:
        """How long after a successful renewal *started* the holder may work."""
        return self.duration_seconds - self.margin_seconds

    @property
    def retry_interval_seconds(self) -> float:
        """Least time between the starts of two tries after a failed renewal."""
        return min(1.0, self.renew_interval_seconds / 4)

    @property
    def request_timeout_seconds(self) -> float:
        """How long a renew request goes unanswered before a new try starts beside it.

        Half the renew interval (at least :data:`MIN_REQUEST_TIMEOUT_SECONDS`),
        so one request hung on a half-open connection (an API server that
        went away without closing it) leaves time for more tries, on a new
        connection, before the deadline. The renewer still waits for the
        first request a while longer
        (:data:`~leasehold.worker.renewer.REQUEST_LIFETIME_TIMEOUTS`): a slow
        answer counts. No request outlives the deadline.
        """
        return max(MIN_REQUEST_TIMEOUT_SECONDS, self.renew_interval_seconds / 2)

    def answer_by(self, request_start: float, deadline: float) -> float:
        """Return when a renew request started at ``request_start`` is given up.

        ``deadline`` is the current local deadline (monotonic): an answer
        after it would be worthless.
        """
        return min(request_start + self.request_timeout_seconds, deadline)

    def deadline_after(self, request_start: float) -> float:
        """Return the local deadline earned by a successful renewal.

        ``request_start`` is the monotonic time taken right *before* the
        request was sent, never when its answer came back.
        """
        return request_start + self.window_seconds
