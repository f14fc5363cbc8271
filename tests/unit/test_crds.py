"""The CRD YAML is generated from the models and must not drift."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from leasehold.cli import main
from leasehold.lease import api
from leasehold.lease.api import crds

REPO = Path(__file__).resolve().parents[2]


def test_checked_in_crds_match_the_models() -> None:
    for name, crd in crds.all_crds().items():
        path = REPO / "deploy" / "crds" / name
        assert path.is_file(), f"{path} missing: run `make crds`"
        assert path.read_text() == crds.render(crd), f"{path} is stale: run `make crds`"


def test_check_flag_reports_stale_files(tmp_path: Path, capsys: Any) -> None:
    assert main(["crds", "--output", str(tmp_path)]) == 0
    assert main(["crds", "--check", "--output", str(tmp_path)]) == 0
    victim = tmp_path / "jobleases.leasehold.dev.yaml"
    victim.write_text(victim.read_text().replace("maximum: 3600", "maximum: 7200"))
    assert main(["crds", "--check", "--output", str(tmp_path)]) == 1
    assert "jobleases.leasehold.dev.yaml" in capsys.readouterr().err


def _walk(schema: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(schema, dict):
        found.append(schema)
        for value in schema.values():
            found.extend(_walk(value))
    elif isinstance(schema, list):
        for value in schema:
            found.extend(_walk(value))
    return found


def test_schema_is_structural() -> None:
    """No $ref, anyOf-with-null, title, or properties next to additionalProperties."""
    for crd in crds.all_crds().values():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for node in _walk(schema):
            assert "$ref" not in node
            assert "$defs" not in node
            assert "title" not in node
            assert node.get("type") != "null"
            assert not ("properties" in node and "additionalProperties" in node)


def test_rendered_yaml_round_trips() -> None:
    for crd in crds.all_crds().values():
        assert yaml.safe_load(crds.render(crd)) == crd


def test_lease_crd_has_transition_rules_and_columns() -> None:
    crd = crds.job_lease_crd()
    version = crd["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert any("oldSelf.fencingToken + 1" in r for r in rules)
    assert any("self.completion == oldSelf.completion" in r for r in rules)
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns[:4] == ["Job", "Holder", "Token", "Renewed"]
    assert crd["spec"]["names"]["shortNames"][0] == "jlease"


def test_leased_job_defaults_and_bounds() -> None:
    crd = crds.leased_job_crd()
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    duration = spec["properties"]["leaseDurationSeconds"]
    assert (duration["minimum"], duration["maximum"]) == (1, api.MAX_LEASE_DURATION_SECONDS)
    assert duration["default"] == 30
    assert spec["properties"]["maxAttempts"]["minimum"] == 1
    assert crd["spec"]["names"]["shortNames"][0] == "ljob"
