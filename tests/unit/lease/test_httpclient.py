"""How ``leasehold run``'s standard-library client finds its cluster (no API server needed)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml

from leasehold.lease.httpclient import ClusterConfigError, HttpLeaseClient, load_cluster_config


def kubeconfig(server: str, user: dict[str, object], *, context: str = "c") -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server}}],
        "users": [{"name": context, "user": user}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
    }


def test_a_token_kubeconfig_in_json(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(kubeconfig("https://10.0.0.1:6443", {"token": "t0k"})))
    config = load_cluster_config(path)
    assert (config.host, config.port) == ("10.0.0.1", 6443)
    assert config.tls is not None
    assert config.auth_headers() == {"Authorization": "Bearer t0k"}


def test_a_server_url_path_prefixes_every_request(tmp_path: Path) -> None:
    """An API server behind a proxy path (``https://host/k8s/clusters/c-x``) keeps the path."""
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(kubeconfig("https://proxy:443/k8s/clusters/c-x/", {"token": "t"})))
    config = load_cluster_config(path)
    lease_path = HttpLeaseClient(config)._path("ns", "job")
    assert lease_path == "/k8s/clusters/c-x/apis/leasehold.dev/v1alpha1/namespaces/ns/jobleases/job"
    path.write_text(json.dumps(kubeconfig("https://10.0.0.1:6443", {"token": "t"})))
    assert HttpLeaseClient(load_cluster_config(path))._path("ns").startswith("/apis/")


def test_a_yaml_kubeconfig_with_a_token_file_relative_to_it(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("first\n")
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig("http://127.0.0.1:8080", {"tokenFile": "token"})))
    config = load_cluster_config(path)
    assert config.tls is None
    assert config.auth_headers() == {"Authorization": "Bearer first"}
    (tmp_path / "token").write_text("rotated\n")  # a projected token is replaced in place
    assert config.auth_headers() == {"Authorization": "Bearer rotated"}


def test_a_kubeconfig_list_is_merged_and_the_first_file_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_text(json.dumps(kubeconfig("http://first:1", {"token": "one"})))
    second.write_text(json.dumps(kubeconfig("http://second:2", {"token": "two"})))
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing'}:{second}")
    config = load_cluster_config()
    assert (config.host, config.port) == ("first", 1)
    assert config.auth_headers() == {"Authorization": "Bearer one"}


def test_basic_auth(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(kubeconfig("http://h:1", {"username": "u", "password": "p"})))
    expected = "Basic " + base64.b64encode(b"u:p").decode()
    assert load_cluster_config(path).auth_headers() == {"Authorization": expected}


def test_exec_credentials_are_refused_with_a_reason(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(kubeconfig("https://h:1", {"exec": {"command": "aws"}})))
    with pytest.raises(ClusterConfigError, match="exec"):
        load_cluster_config(path)


def test_no_kubeconfig_outside_a_pod_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ClusterConfigError, match="not in a pod"):
        load_cluster_config()
