"""Create-time checks that CEL cannot make: the rules of the validating admission webhook.

Why this module exists: the CRDs' schema and CEL rules refuse most bad input
at the API server, but some checks need code the API server does not have:
whether ``spec.timeZone`` is in the IANA database, whether ``spec.schedule``
parses (leasehold's own cron parser, :func:`leasehold.lease.schedule.parse`),
how long ``spec.params`` is as JSON (CEL cannot size a free-form object), and
whether a ``successPolicy``'s ``succeededIndexes`` still fit when an elastic
Indexed job changes ``spec.completions`` (CEL cannot walk the intervals).
batch/v1 refuses a bad ``timeZone`` or ``schedule`` of a CronJob with 422
(``pkg/apis/batch/validation/validation.go``, ``validateCronJobSpec``); the
webhook (``leasehold.controller.handlers``) refuses with these messages.

The rules are pure: they read the admission request's object (and, on an
update, the old object) and return what is wrong, naming the field. Nothing
here is needed for safety: the operator checks the same things before it acts
on an object (``InvalidSchedule``, ``InvalidSpec``) and never schedules a run
of an invalid LeasedCronJob nor claims for an invalid LeasedJob. The webhook
only tells the user at once.

On an update a field is checked only when it changed (as batch/v1 does for
``timeZone``, and as CRD validation ratcheting does): an object stored with a
bad value while the webhook was away can still be suspended, relabelled or
have its finalizers removed; only bringing in a bad value is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from leasehold.lease import schedule
from leasehold.lease.api.leasedjob import MAX_PARAMS_BYTES, params_size
from leasehold.lease.indexes import parse_intervals

Body = Mapping[str, Any]
"""An object as the admission request carries it (decoded JSON)."""


def time_zone_error(time_zone: object) -> str | None:
    """Why ``spec.timeZone`` cannot be used, or ``None``.

    Args:
        time_zone: the field's value; ``None`` (unset: UTC) is fine.

    Returns:
        A message naming ``spec.timeZone``, or ``None``. batch/v1 refuses
        an unknown zone the same way (``validateTimeZone``).
    """
    if time_zone is None:
        return None
    if not isinstance(time_zone, str):
        return "spec.timeZone: must be a string"
    try:
        schedule.zone(time_zone)
    except schedule.InvalidScheduleError as exc:
        return str(exc)
    return None


def schedule_error(expression: object) -> str | None:
    """Why ``spec.schedule`` does not parse, or ``None``.

    Read by the operator's own parser (:func:`leasehold.lease.schedule.parse`),
    in UTC: the zone is :func:`time_zone_error`'s to judge.

    Args:
        expression: the field's value.

    Returns:
        A message naming ``spec.schedule`` (the one the operator's
        ``InvalidSchedule`` condition would show), or ``None``.
    """
    if not isinstance(expression, str):
        return "spec.schedule: must be a string"
    try:
        schedule.parse(expression)
    except schedule.InvalidScheduleError as exc:
        return str(exc)
    return None


def params_error(params: object, path: str) -> str | None:
    """Why ``params`` is too long, or ``None``.

    Args:
        params: the field's value; ``None`` (unset) is fine.
        path: where it is, e.g. ``spec.params`` or ``spec.jobTemplate.spec.params``.

    Returns:
        A message naming ``path``, or ``None``. The limit and its measure are
        the ones the operator applies (:data:`MAX_PARAMS_BYTES`,
        :func:`~leasehold.lease.api.leasedjob.params_size`).
    """
    if params is None:
        return None
    try:
        size = params_size(params)
    except (TypeError, ValueError):
        return f"{path}: must be a JSON object"
    if size > MAX_PARAMS_BYTES:
        return (
            f"{path}: Too long: may not be more than {MAX_PARAMS_BYTES} bytes as JSON"
            f" (it is {size})"
        )
    return None


def _at(body: Body | None, *path: str) -> object:
    """The value at ``path`` in ``body``, or ``None`` where anything on the way is missing."""
    node: object = body
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _changed(new: Body, old: Body | None, *path: str) -> bool:
    """Whether the field at ``path`` is new or changed (always on a create: ``old`` is ``None``)."""
    return old is None or _at(new, *path) != _at(old, *path)


def succeeded_indexes_errors(spec: object) -> list[str]:
    """``successPolicy`` rules whose ``succeededIndexes`` do not fit ``spec.completions``.

    batch/v1 judges them against the new ``completions`` when an elastic
    Indexed Job scales (``validateJobSpec`` runs on every update:
    pkg/apis/batch/validation/validation.go, ``validateIndexesFormat``), so a
    scale-down below an index a rule names is refused with 422. CEL cannot
    walk the intervals; the webhook checks them when ``completions`` changes
    (at create the operator's ``InvalidSpec`` already tells).

    Args:
        spec: the LeasedJob's ``spec`` as the request carries it.

    Returns:
        One message per rule that does not parse, naming
        ``spec.successPolicy.rules[i].succeededIndexes``.
    """
    if not isinstance(spec, Mapping):
        return []
    completions = spec.get("completions")
    rules = _at(spec, "successPolicy", "rules")
    if not isinstance(completions, int) or not isinstance(rules, list):
        return []
    errors = []
    for i, rule in enumerate(rules):
        text = rule.get("succeededIndexes") if isinstance(rule, Mapping) else None
        if not isinstance(text, str):
            continue
        try:
            parse_intervals(text, completions)
        except ValueError as exc:
            errors.append(
                f"spec.successPolicy.rules[{i}].succeededIndexes: Invalid value: {text!r}:"
                f" error parsing succeededIndexes: {exc}"
            )
    return errors


def leased_job_errors(new: Body, old: Body | None = None) -> list[str]:
    """What the webhook refuses in a LeasedJob.

    Args:
        new: the object as it would be stored.
        old: the stored object on an update; ``None`` on a create.

    Returns:
        Messages naming the fields (empty: allowed). Only a changed field is
        checked: ``spec.params``; on an update that changes ``spec.completions``
        (an elastic Indexed job), the ``successPolicy`` indexes against it.
    """
    errors = []
    if _changed(new, old, "spec", "params"):
        errors.append(params_error(_at(new, "spec", "params"), "spec.params"))
    if old is not None and _changed(new, old, "spec", "completions"):
        errors.extend(succeeded_indexes_errors(_at(new, "spec")))
    return [e for e in errors if e]


def leased_cron_job_errors(new: Body, old: Body | None = None) -> list[str]:
    """What the webhook refuses in a LeasedCronJob.

    Args:
        new: the object as it would be stored.
        old: the stored object on an update; ``None`` on a create.

    Returns:
        Messages naming the fields (empty: allowed): ``spec.schedule``,
        ``spec.timeZone``, ``spec.jobTemplate.spec.params``. Only a changed
        field is checked.
    """
    errors = []
    if _changed(new, old, "spec", "schedule"):
        errors.append(schedule_error(_at(new, "spec", "schedule")))
    if _changed(new, old, "spec", "timeZone"):
        errors.append(time_zone_error(_at(new, "spec", "timeZone")))
    template_params = ("spec", "jobTemplate", "spec", "params")
    if _changed(new, old, *template_params):
        errors.append(params_error(_at(new, *template_params), ".".join(template_params)))
    return [e for e in errors if e]
