"""Fencing for Kubernetes objects: the worker's side of the admission policy.

Why this module exists: a worker that writes Kubernetes objects other than its
JobLease (a ConfigMap with results, a custom resource it drives) can be
stalled with a write on the wire, like any other writer. The
ValidatingAdmissionPolicy in ``deploy/fencing/validatingadmissionpolicy.yaml``
fences such objects at the API server: an UPDATE of an object labelled
``leasehold.dev/fenced: "true"`` is denied when the new object's
``leasehold.dev/fencing-token`` annotation is missing, not an integer, or
lower than the stored one (Kleppmann, "How to do distributed locking", 2016:
"fencing tokens"). This module puts the token on what the worker sends.

Every write must carry the token. The policy sees the object *after* a patch
is applied: a merge patch that leaves the annotation out inherits the stored
token and is judged as if written under it. :func:`fenced_patch` makes the
token part of every patch.

The bodies are plain dicts (the JSON the API server takes), so this module
needs no Kubernetes client and can be used with any of them.
"""

from __future__ import annotations

import copy
from typing import Any

from leasehold.names import ANNOTATION_FENCING_DOMAIN, ANNOTATION_TOKEN, LABEL_FENCED


def _checked(token: int) -> int:
    if isinstance(token, bool) or not isinstance(token, int) or token < 0:
        raise ValueError(f"a fencing token is a non-negative int, got {token!r}")
    return token


def _metadata_map(body: dict[str, Any], field: str) -> dict[str, Any]:
    metadata = body.get("metadata")
    if metadata is None:
        metadata = body["metadata"] = {}
    values = metadata.get(field)
    if values is None:
        values = metadata[field] = {}
    return values


def annotate(body: dict[str, Any], token: int, domain: str | None = None) -> dict[str, Any]:
    """Put the fencing token (and its domain) on an object body or patch, in place.

    Fencing tokens: Kleppmann, "How to do distributed locking" (2016).

    Args:
        body: an object (or a merge / strategic-merge patch) as a dict.
        token: the writer's fencing token.
        domain: the token's fencing domain: the JobLease's name (env
            ``LEASEHOLD_LEASE``). Tokens of two domains (two jobs, two indexes
            of an Indexed job) are not comparable: the policy refuses a write
            whose domain is not the one the object already carries.

    Returns:
        ``body``, with ``metadata.annotations["leasehold.dev/fencing-token"]``
        set to the token as a decimal string (and ``leasehold.dev/fencing-domain``
        to ``domain``, when given).

    Raises:
        ValueError: the token is negative or not an int, or the domain is empty.
    """
    annotations = _metadata_map(body, "annotations")
    annotations[ANNOTATION_TOKEN] = str(_checked(token))
    if domain is not None:
        if not domain:
            raise ValueError("a fencing domain is a JobLease name, got an empty string")
        annotations[ANNOTATION_FENCING_DOMAIN] = domain
    return body


def fenced_patch(
    token: int, patch: dict[str, Any] | None = None, domain: str | None = None
) -> dict[str, Any]:
    """A merge (or strategic-merge) patch that carries the fencing token.

    Send it without ``resourceVersion``: the policy decides by token, and a
    resourceVersion precondition would turn a stale write into a 409 for an
    unrelated reason.

    Args:
        token: the writer's fencing token.
        patch: the change, e.g. ``{"data": {"result": "42"}}``; not modified.
        domain: the token's fencing domain (the JobLease name), see :func:`annotate`.

    Returns:
        A copy of ``patch`` with the token (and domain) annotations added.

    Raises:
        ValueError: the token is negative or not an int.

    Example:
        ``core.patch_namespaced_config_map(name, ns, fenced_patch(8, {"data": d}))``
    """
    return annotate(copy.deepcopy(patch) if patch else {}, token, domain)


def opt_in(body: dict[str, Any]) -> dict[str, Any]:
    """Label an object body so that the admission policy fences its updates.

    Args:
        body: an object to be created, as a dict.

    Returns:
        ``body``, with the label ``leasehold.dev/fenced: "true"`` set in place.
    """
    _metadata_map(body, "labels")[LABEL_FENCED] = "true"
    return body


def token_of(body: dict[str, Any]) -> int | None:
    """The fencing token an object carries.

    Args:
        body: an object as returned by the API server, as a dict.

    Returns:
        The token, or ``None`` when the annotation is missing or is not a
        non-negative integer.
    """
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(ANNOTATION_TOKEN)
    if not isinstance(value, str) or not value.isdigit() or not value.isascii():
        return None
    return int(value)
