"""The Helm chart's values, schema, templates and CRD copies agree (no cluster, no helm).

- every key of values.yaml is declared in values.schema.json and vice versa,
  every object of the schema that declares properties forbids others, and
  every key carries a comment;
- every leaf value is used by a template (``.Values.a.b``);
- the chart's CRDs are byte-for-byte the generated ones in deploy/crds;
- helpers are namespaced, the dashboard charts every metric.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

import sync_chart_crds

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "leasehold"
METRICS = (
    "leasehold_leases_held",
    "leasehold_claims_total",
    "leasehold_renewals_observed_total",
    "leasehold_reclaims_total",
    "leasehold_expirations_total",
    "leasehold_watch_lag_seconds",
    "leasehold_jobs",
    "leasehold_events_dropped_total",
)


def load_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return values


def load_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return schema


def template_text() -> str:
    return "\n".join(p.read_text() for p in sorted((CHART / "templates").iterdir()))


def declared_paths(schema: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, bool]]:
    """Yield every property path of the schema, with whether it is a leaf.

    A leaf is a property that declares no properties of its own: a scalar,
    a list, or a free-form map such as ``resources`` or ``podAnnotations``.
    """
    for key, node in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        leaf = "properties" not in node
        yield path, leaf
        if not leaf:
            yield from declared_paths(node, f"{path}.")


def value_paths(values: dict[str, Any], schema: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """Yield the key paths of values.yaml, not descending into free-form maps."""
    for key, value in values.items():
        path = f"{prefix}{key}"
        yield path
        node = schema.get("properties", {}).get(key, {})
        if isinstance(value, dict) and "properties" in node:
            yield from value_paths(value, node, f"{path}.")


def test_every_value_is_in_the_schema_and_every_schema_key_has_a_value() -> None:
    schema = load_schema()
    in_values = set(value_paths(load_values(), schema))
    in_schema = {path for path, _ in declared_paths(schema)}
    assert sorted(in_values - in_schema) == [], "values.yaml keys missing from the schema"
    assert sorted(in_schema - in_values) == [], "schema keys without a default in values.yaml"


def test_schema_objects_forbid_unknown_keys() -> None:
    def walk(node: Any, where: str) -> Iterator[str]:
        if isinstance(node, dict):
            if "properties" in node and node.get("additionalProperties") is not False:
                yield where or "(root)"
            for key, child in node.items():
                yield from walk(child, f"{where}/{key}")
        elif isinstance(node, list):
            for index, child in enumerate(node):
                yield from walk(child, f"{where}/{index}")

    assert list(walk(load_schema(), "")) == []


def test_every_value_key_is_commented() -> None:
    schema = load_schema()
    declared = {path for path, _ in declared_paths(schema)}
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, str]] = []
    uncommented = []
    for number, line in enumerate(lines):
        match = re.match(r"^( *)([A-Za-z][A-Za-z0-9_]*):", line)
        if not match:
            continue
        indent, key = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([*(k for _, k in stack), key])
        stack.append((indent, key))
        if path not in declared:
            continue  # inside a free-form map (e.g. resources.requests)
        previous = lines[number - 1].strip() if number else ""
        if not previous.startswith("#"):
            uncommented.append(path)
    assert uncommented == [], "values.yaml keys without a comment line above them"


def test_every_leaf_value_is_used_by_a_template() -> None:
    text = template_text()
    unused = [
        path
        for path, leaf in declared_paths(load_schema())
        if leaf and not re.search(rf"\.Values\.{re.escape(path)}(?![A-Za-z0-9_])", text)
    ]
    assert unused == [], "values that no template reads"


def test_chart_readme_lists_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    missing = [
        path
        for path, leaf in declared_paths(load_schema())
        if leaf and f"| `{path}` |" not in readme
    ]
    assert missing == [], "values missing from the table in deploy/helm/leasehold/README.md"


def test_chart_crds_match_deploy_crds() -> None:
    generated = sorted(p.name for p in (REPO / "deploy" / "crds").glob("*.yaml"))
    assert generated, "deploy/crds is empty"
    assert sync_chart_crds.drift() == [], "run `python testing/sync_chart_crds.py`"
    for name in generated:
        copy = (CHART / "crds" / name).read_bytes()
        assert copy == (REPO / "deploy" / "crds" / name).read_bytes(), name


def test_drift_check_catches_a_changed_missing_or_extra_crd(tmp_path: Path) -> None:
    source, target = tmp_path / "src", tmp_path / "chart"
    source.mkdir()
    (source / "a.leasehold.dev.yaml").write_text("a: 1\n")
    (source / "b.leasehold.dev.yaml").write_text("b: 1\n")
    assert sync_chart_crds.sync(source, target) == ["a.leasehold.dev.yaml", "b.leasehold.dev.yaml"]
    (target / "kopf-peering.yaml").write_text("not ours\n")
    assert sync_chart_crds.drift(source, target) == []
    (target / "a.leasehold.dev.yaml").write_text("a: 2\n")
    (target / "b.leasehold.dev.yaml").unlink()
    (target / "c.leasehold.dev.yaml").write_text("c: 1\n")
    assert sync_chart_crds.drift(source, target) == [
        "a.leasehold.dev.yaml",
        "b.leasehold.dev.yaml",
        "c.leasehold.dev.yaml",
    ]
    sync_chart_crds.sync(source, target)
    assert sync_chart_crds.drift(source, target) == []
    assert (target / "kopf-peering.yaml").read_text() == "not ours\n"


def test_kopf_peering_crds_are_kopfs_own() -> None:
    docs = list(yaml.safe_load_all((CHART / "crds" / "kopf-peering.yaml").read_text()))
    assert {(d["spec"]["group"], d["spec"]["names"]["kind"], d["spec"]["scope"]) for d in docs} == {
        ("kopf.dev", "ClusterKopfPeering", "Cluster"),
        ("kopf.dev", "KopfPeering", "Namespaced"),
    }


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart["apiVersion"] == "v2"
    assert chart["kubeVersion"] == ">=1.30.0-0"
    assert chart["appVersion"] == project["version"]


def test_helpers_are_namespaced_and_names_are_cut_to_63() -> None:
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    defined = re.findall(r'define "([^"]+)"', template_text())
    assert defined
    assert [name for name in defined if not name.startswith("leasehold.")] == []
    for name in ("name", "fullname", "suffixedName", "chart", "serviceAccountName"):
        body = helpers.split(f'define "leasehold.{name}"', 1)[1].split("{{- end }}\n{{- end }}")[0]
        assert "trunc 63" in body, f"leasehold.{name} does not cut to 63 characters"


def test_dashboard_charts_every_metric() -> None:
    dashboard = json.loads((CHART / "dashboards" / "leasehold.json").read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    missing = [m for m in METRICS if not re.search(rf"\b{m}(_bucket)?\b", exprs)]
    assert missing == []
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_dashboard_uses_only_metrics_the_operator_exports() -> None:
    from leasehold.controller import metrics

    metrics.JobPhases()  # labelled gauges show up once a label is set
    families = list(metrics.REGISTRY.collect())
    exported = {f.name for f in families} | {s.name for f in families for s in f.samples}
    dashboard = json.loads((CHART / "dashboards" / "leasehold.json").read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    used = set(re.findall(r"\bleasehold_[a-z_]+", exprs))
    assert used - exported == set()
    assert set(METRICS) <= {name.removesuffix("_bucket") for name in exported}
