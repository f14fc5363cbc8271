"""A job's first lease created held by its pod: the create is the plain create plus its claim."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from leasehold.lease import api, protocol
from leasehold.lease.leaseops import stored_from_body
from leasehold.lease.protocol import FencingToken, HolderIdentity
from leasehold.lease.store import HeldBy, held_body, new_lease_body

NOW = datetime(2026, 12, 5, 5, 0, tzinfo=UTC)


def _plain(**overrides: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "job_name": "job",
        "lease_duration_seconds": 10,
        "max_fencing_token": 3,
        "job_uid": "0a1b",
        "mode": api.LeaseMode.PUSH,
        "startup_deadline_seconds": 600,
    }
    fields.update(overrides)
    return new_lease_body("ns", "job", **fields)  # type: ignore[arg-type]


def test_a_held_create_is_what_the_plain_create_and_its_claim_would_leave() -> None:
    plain = _plain()
    held = held_body(plain, HeldBy("job-1", "0c2d", 1), NOW)
    claimed = protocol.claim(
        stored_from_body(plain).record,
        HolderIdentity("job-1"),
        NOW,
        holder_uid="0c2d",
        token=FencingToken(1),
        job_uid="0a1b",
    )
    assert isinstance(claimed, protocol.Allowed)
    assert stored_from_body(held).record == claimed.record
    spec = held["spec"]
    assert spec["baseFencingToken"] == 0 and spec["fencingToken"] == 1
    assert spec["acquireTime"] == spec["renewTime"]  # a start, not a renewal
    api.JobLease.model_validate(held)
    assert "holderIdentity" not in plain["spec"]  # type: ignore[operator]


@pytest.mark.parametrize(
    ("overrides", "token"),
    [({"suspended": True}, 1), ({"max_fencing_token": 0}, 1), ({}, 2)],
    ids=["suspended", "exhausted", "not-the-next-token"],
)
def test_no_held_create_where_no_claim_could_take_the_lease(
    overrides: dict[str, object], token: int
) -> None:
    with pytest.raises(ValueError, match="no held create"):
        held_body(_plain(**overrides), HeldBy("job-1", "0c2d", token), NOW)
