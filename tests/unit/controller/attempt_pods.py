"""Attempt pod bodies for the unit tests of what the operator remembers and counts of pods."""

from __future__ import annotations

from typing import Any

from leasehold import names


def pod(job: str, token: int) -> dict[str, Any]:
    """A pod of ``job``'s attempt under ``token``, controlled by the LeasedJob ``job-uid``."""
    return {
        "metadata": {
            "namespace": "ns",
            "name": f"{job}-{token}",
            "labels": {names.LABEL_JOB: job, names.LABEL_TOKEN: str(token)},
            "ownerReferences": [{"kind": "LeasedJob", "uid": "job-uid", "controller": True}],
        }
    }


def attempt_pod(
    job: str,
    token: int,
    phase: str,
    *,
    uid: str | None = None,
    index: int | None = None,
    owner: str = "job-uid",
) -> dict[str, Any]:
    """:func:`pod` in ``phase``, with a UID, its controller ``owner`` and an optional index."""
    body = pod(job, token)
    meta = body["metadata"]
    meta["uid"] = uid or f"{job}-{index}-{token}"
    meta["ownerReferences"][0]["uid"] = owner
    if index is not None:
        meta["name"] = f"{job}-{index}-{token}"
        meta["labels"][names.LABEL_COMPLETION_INDEX] = str(index)
    body["status"] = {"phase": phase}
    return body
