"""Generate the CustomResourceDefinitions from the pydantic models.

Why this module exists: the models in :mod:`leasehold.lease.api` (one module per
kind) are the single source of truth. This module turns their JSON schema into a *structural*
OpenAPI v3 schema that the API server accepts (``$ref`` inlined, optional
fields as plain properties, no ``title``), adds the Kubernetes parts a JSON
schema cannot say (status and scale subresources, printer columns, short
names, categories), and writes ``deploy/crds/*.yaml``. ``make crds`` runs it; a test
fails when the checked-in YAML is stale.

Reference: Kubernetes docs, "Extend the Kubernetes API with
CustomResourceDefinitions", sections "Specifying a structural schema",
"Validation rules" and "Additional printer columns".
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import BaseModel

from leasehold import names
from leasehold.lease.api import joblease, leasedcronjob, leasedjob
from leasehold.lease.indexes import INDEX_SEPARATOR

_DROP_KEYS: Final = frozenset({"title"})


def _inline(schema: Any, defs: dict[str, Any]) -> Any:
    """Return ``schema`` with ``$ref``s inlined and pydantic-isms removed."""
    if isinstance(schema, list):
        return [_inline(item, defs) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        merged = {**copy.deepcopy(defs[name]), **{k: v for k, v in schema.items() if k != "$ref"}}
        return _inline(merged, defs)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o != {"type": "null"}]
        if len(options) == 1:
            rest = {k: v for k, v in schema.items() if k != "anyOf"}
            merged = {**_inline(options[0], defs), **rest}
            if merged.get("default", 0) is None:
                del merged["default"]
            return _inline(merged, defs)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROP_KEYS:
            continue
        if key == "additionalProperties" and value is True:
            continue  # pydantic's extra="allow"/Any: pruning keeps the store strict.
        if key == "properties":
            out[key] = {name: _inline(sub, defs) for name, sub in value.items()}
        else:
            out[key] = _inline(value, defs)
    if out.get("default", 0) is None:
        del out["default"]
    return out


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """Build the structural OpenAPI v3 schema of a model.

    Args:
        model: a pydantic model class (``JobLeaseSpec``, ``LeasedJobStatus``...).

    Returns:
        A JSON-ready dict usable under ``openAPIV3Schema.properties``.
    """
    raw = model.model_json_schema(by_alias=True, mode="serialization")
    defs = raw.pop("$defs", {})
    result: dict[str, Any] = _inline(raw, defs)
    return result


def _crd(
    *,
    kind: str,
    plural: str,
    short_names: list[str],
    spec_model: type[BaseModel],
    status_model: type[BaseModel],
    description: str,
    columns: list[dict[str, Any]],
    rules: list[dict[str, Any]] | None = None,
    scale: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec_schema = structural_schema(spec_model)
    spec_schema["description"] = spec_model.__doc__.strip() if spec_model.__doc__ else ""
    status_schema = structural_schema(status_model)
    status_schema["description"] = status_model.__doc__.strip() if status_model.__doc__ else ""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{names.GROUP}",
            "labels": {"app.kubernetes.io/part-of": "leasehold"},
        },
        "spec": {
            "group": names.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["leasehold"],
            },
            "versions": [
                {
                    "name": names.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}, **({"scale": scale} if scale else {})},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "description": description,
                            "type": "object",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                            **({"x-kubernetes-validations": rules} if rules else {}),
                        }
                    },
                }
            ],
        },
    }


def _col(name: str, type_: str, path: str, description: str, priority: int = 0) -> dict[str, Any]:
    column: dict[str, Any] = {
        "name": name,
        "type": type_,
        "jsonPath": path,
        "description": description,
    }
    if priority:
        column["priority"] = priority
    return column


_AGE: Final = _col("Age", "date", ".metadata.creationTimestamp", "Time since creation.")


def _name_without_separator(why: str) -> dict[str, Any]:
    """The rule that refuses a name with the index separator, at create only.

    ``optionalOldSelf`` makes the rule run on create too, where ``oldSelf``
    has no value; on an update it has one and the rule passes, so an object
    created before the rule is never refused a status or spec write.

    Args:
        why: the end of the message, after ``metadata.name must not contain '.':``.

    Returns:
        One ``x-kubernetes-validations`` entry (at the schema's root).
    """
    return {
        "rule": f"oldSelf.hasValue() || !self.metadata.name.contains('{INDEX_SEPARATOR}')",
        "optionalOldSelf": True,
        "message": f"metadata.name must not contain '{INDEX_SEPARATOR}': {why}",
    }


def leased_job_crd() -> dict[str, Any]:
    """The ``LeasedJob`` CRD.

    Returns:
        The CRD object as a JSON-ready dict.
    """
    return _crd(
        kind="LeasedJob",
        plural=names.PLURAL_LEASED_JOBS,
        short_names=["ljob", "ljobs"],
        spec_model=leasedjob.LeasedJobSpec,
        status_model=leasedjob.LeasedJobStatus,
        # batch/v1 Job has no /scale; this one lets kubectl scale --replicas=N set
        # spec.parallelism (status.active: the indexes held; status.selector: its pods).
        scale={
            "specReplicasPath": ".spec.parallelism",
            "statusReplicasPath": ".status.active",
            "labelSelectorPath": ".status.selector",
        },
        rules=[
            {
                "rule": f"size(self.metadata.name) <= {leasedjob.MAX_JOB_NAME_LENGTH}",
                "message": f"metadata.name must be at most {leasedjob.MAX_JOB_NAME_LENGTH}"
                " characters: it is a label value on the job's JobLease and pods"
                " (leasehold.dev/job), as a batch/v1 Job's name is on its pods",
            },
            _name_without_separator(
                "an Indexed job's index leases are named <job>.<index>, and a job's own"
                " lease is named like the job, so a dot could make one job's lease name"
                " another job's index lease"
            ),
        ],
        description="A job run under an expiring lease with a fencing token: when its worker"
        " stalls, the lease is reclaimed and the job runs again under a higher token, and"
        " the stalled worker's late effects are rejected.",
        columns=[
            _col(
                "Phase",
                "string",
                ".status.phase",
                "Pending, Running, Suspended, Succeeded or Failed.",
            ),
            _col("Holder", "string", ".status.holderIdentity", "Current lease holder."),
            _col("Token", "integer", ".status.fencingToken", "Current fencing token."),
            _col("Attempts", "integer", ".status.attempts", "Claims made so far."),
            _col(
                "Last-Attempt",
                "string",
                ".status.lastAttemptReason",
                "Why the latest attempt ended (Succeeded, Failed, Reclaimed...).",
            ),
            _AGE,
            _col("Pod", "string", ".status.podName", "Pod of the latest attempt.", priority=1),
            _col(
                "Completions",
                "string",
                ".status.completionProgress",
                'Succeeded of spec.completions, e.g. "7/10" (jobs with several completions).',
                priority=1,
            ),
        ],
    )


def job_lease_crd() -> dict[str, Any]:
    """The ``JobLease`` CRD, with the CEL transition rules of the protocol.

    Returns:
        The CRD object as a JSON-ready dict.
    """
    return _crd(
        kind="JobLease",
        plural=names.PLURAL_JOB_LEASES,
        short_names=["jlease", "jleases"],
        spec_model=joblease.JobLeaseSpec,
        status_model=joblease.JobLeaseStatus,
        description="The lease record of one LeasedJob: holder, fencing token and completion."
        " The API server enforces the protocol's invariants on every write.",
        columns=[
            _col("Job", "string", ".spec.jobName", "The LeasedJob this lease belongs to."),
            _col("Holder", "string", ".spec.holderIdentity", "Current holder; empty if unheld."),
            _col("Token", "integer", ".spec.fencingToken", "Current fencing token."),
            _col("Renewed", "date", ".spec.renewTime", "Last renewal (holder's clock)."),
            _col("Duration", "integer", ".spec.leaseDurationSeconds", "Lease duration, seconds."),
            _col("Outcome", "string", ".spec.completion.outcome", "Recorded completion, if any."),
            _AGE,
        ],
    )


def leased_cron_job_crd() -> dict[str, Any]:
    """The ``LeasedCronJob`` CRD.

    Returns:
        The CRD object as a JSON-ready dict.
    """
    return _crd(
        kind="LeasedCronJob",
        plural=names.PLURAL_LEASED_CRON_JOBS,
        short_names=["lcj", "lcjs"],
        spec_model=leasedcronjob.LeasedCronJobSpec,
        status_model=leasedcronjob.LeasedCronJobStatus,
        description="LeasedJobs made on a cron schedule. The runs share one fencing domain:"
        " every run's fencing tokens are above every earlier run's; Forbid and Replace are"
        " enforced by the leases.",
        rules=[
            {
                "rule": f"size(self.metadata.name) <= {leasedcronjob.MAX_CRON_NAME_LENGTH}",
                "message": f"metadata.name must be at most {leasedcronjob.MAX_CRON_NAME_LENGTH}"
                " characters: each run is named <name>-<unix minutes> (11 more), and that"
                " name must stay a valid label value (63)",
            },
            _name_without_separator(
                "each run is a LeasedJob named <name>-<unix minutes>, and a LeasedJob's name"
                " has no dot (an Indexed job's index leases are named <job>.<index>)"
            ),
        ],
        columns=[
            _col("Schedule", "string", ".spec.schedule", "The cron schedule."),
            _col("Timezone", "string", ".spec.timeZone", "The schedule's time zone.", 1),
            _col("Suspend", "boolean", ".spec.suspend", "No new runs while true."),
            _col("Active", "string", ".status.active[*].name", "Unfinished runs."),
            _col(
                "Last Schedule",
                "date",
                ".status.lastScheduleTime",
                "The last schedule time a run was started for.",
            ),
            _AGE,
        ],
    )


def all_crds() -> dict[str, dict[str, Any]]:
    """All CRDs keyed by the file name they are written to.

    Returns:
        ``{"leasedjobs.leasehold.dev.yaml": crd, ...}``.
    """
    return {
        "leasedjobs.leasehold.dev.yaml": leased_job_crd(),
        "jobleases.leasehold.dev.yaml": job_lease_crd(),
        "leasedcronjobs.leasehold.dev.yaml": leased_cron_job_crd(),
    }


def source(crd: dict[str, Any]) -> str:
    """The module a CRD is generated from, relative to the repository root.

    One module per kind, named after it (``JobLease``: ``joblease.py``), as
    kubebuilder's ``<kind>_types.go``.
    """
    return f"operator/leasehold/lease/api/{crd['spec']['names']['kind'].lower()}.py"


def render(crd: dict[str, Any]) -> str:
    """Render one CRD object as YAML text, with the generated-file header."""
    header = f"# Generated by `make crds` from {source(crd)}. Do not edit.\n"
    return header + yaml.safe_dump(crd, sort_keys=False, width=100)


def write(directory: Path) -> list[Path]:
    """Write every CRD into ``directory`` (created if missing); return the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, crd in all_crds().items():
        path = directory / name
        path.write_text(render(crd))
        written.append(path)
    return written
