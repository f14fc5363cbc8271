"""The Helm chart against a real API server.

- ``helm lint --strict`` and the values schema;
- the chart rendered with default and with HA/metrics values
  (``ci/ha-metrics-values.yaml``), applied with ``kubectl apply
  --dry-run=server`` (a minimal ServiceMonitor CRD is created first when the
  cluster has none, so the ServiceMonitor is checked too);
- ``helm install``: the chart's operator pod runs through the pod runner as
  ``leasehold operator ...`` with its own pod-bound service-account token, so
  a missing permission fails the test; a LeasedJob applied with kubectl runs
  as the chart's worker service account and completes; ``helm uninstall``
  removes every object of the release;
- a pool's token (bound to a pod) is confined by RBAC and by the chart's
  ValidatingAdmissionPolicy to the lease it holds or claims as itself; a push
  attempt pod's token (the worker ServiceAccount) claims nothing, lists
  nothing and keeps only the lease the operator claimed for it; no holder
  touches ``spec.acquireTime``: ``kubectl auth can-i --as`` and real requests.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from leasehold import names, worker
from leasehold.controller import handlers
from leasehold.lease.api import LeaseMode
from leasehold.lease.errors import StoreError
from leasehold.lease.protocol import Outcome
from leasehold.lease.store import Accepted, HeldBy, LeaseStore
from localcluster.binaries import tools_bin_dir
from localcluster.kubectl import Kubectl
from podrunner import PodRunner
from ports import free_port
from tests.integration.jobs import wait_for

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "leasehold"
CI_VALUES = CHART / "ci" / "ha-metrics-values.yaml"
INSTANCE = "app.kubernetes.io/instance"

SERVICE_MONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {
            "kind": "ServiceMonitor",
            "listKind": "ServiceMonitorList",
            "plural": "servicemonitors",
            "singular": "servicemonitor",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}
"""Just enough of the Prometheus Operator's CRD for a server-side dry run."""


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''} rendered"
    return found[0]


def rules_of(role: dict[str, Any]) -> set[tuple[str, str, tuple[str, ...], tuple[str, ...]]]:
    return {
        (group, resource, tuple(sorted(rule["verbs"])), tuple(rule.get("resourceNames", ())))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


# What the operator calls (service.py, store.py) and what Kopf needs.
OPERATOR_RULES = {
    ("leasehold.dev", "leasedjobs", ("create", "delete", "get", "list", "watch"), ()),
    ("leasehold.dev", "leasedcronjobs", ("get", "list", "watch"), ()),
    ("leasehold.dev", "leasedcronjobs/status", ("get", "patch"), ()),
    ("leasehold.dev", "leasedcronjobs/finalizers", ("update",), ()),
    ("leasehold.dev", "leasedjobs/status", ("get", "patch"), ()),
    ("leasehold.dev", "leasedjobs/finalizers", ("update",), ()),
    ("leasehold.dev", "jobleases", ("create", "delete", "get", "list", "patch", "watch"), ()),
    ("", "pods", ("create", "delete", "get", "list", "watch"), ()),
    ("", "events", ("create", "patch"), ()),
    # Kueue (issue 30): the Workload of a queued LeasedJob, its LocalQueue.
    (
        "kueue.x-k8s.io",
        "workloads",
        ("create", "delete", "get", "list", "patch", "update", "watch"),
        (),
    ),
    ("kueue.x-k8s.io", "workloads/status", ("patch", "update"), ()),
    ("kueue.x-k8s.io", "localqueues", ("get", "list", "watch"), ()),
}
# Cluster-scoped reads for Kueue: what an admission names, what a priority comes from.
KUEUE_CLUSTER_RULES = {
    ("kueue.x-k8s.io", "resourceflavors", ("get", "list", "watch"), ()),
    ("kueue.x-k8s.io", "clusterqueues", ("get", "list", "watch"), ()),
    ("kueue.x-k8s.io", "workloadpriorityclasses", ("get", "list", "watch"), ()),
    ("scheduling.k8s.io", "priorityclasses", ("get",), ()),
}
POOL_VERBS = ("claim", "get", "list", "patch", "watch")
"""A pull pool's verbs on jobleases (sorted); ``claim`` is the worker lease policy's."""
CRD_RULE = ("apiextensions.k8s.io", "customresourcedefinitions", ("get", "list", "watch"), ())


class Helm:
    """The project's helm binary, bound to the cluster under test."""

    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(self.binary), "--kubeconfig", str(self.kubeconfig), *args]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            pytest.fail(f"{shlex.join(argv)} exited {result.returncode}:\n{result.stderr}")
        return result

    def template(self, release: str, namespace: str, *args: str) -> list[dict[str, Any]]:
        out = self("template", release, str(CHART), "--namespace", namespace, *args).stdout
        return documents(out)


@pytest.fixture(scope="module")
def helm(kubeconfig: Path) -> Helm:
    return Helm(tools_bin_dir() / "helm", kubeconfig)


@pytest.fixture(scope="module")
def chart_crds(crds_installed: Path, kubectl: Kubectl) -> Iterator[None]:
    """Kopf's peering CRDs from the chart, and a ServiceMonitor CRD if the cluster has none.

    Created (not applied) so that a real cluster's own copies are left as
    they are; a ServiceMonitor CRD made here is deleted afterwards.
    """
    made_service_monitor = (
        kubectl("get", "crd", "servicemonitors.monitoring.coreos.com", check=False).returncode != 0
    )
    if made_service_monitor:
        kubectl("create", "-f", "-", input=json.dumps(SERVICE_MONITOR_CRD))
    created = kubectl("create", "-f", str(CHART / "crds" / "kopf-peering.yaml"), check=False)
    assert created.returncode == 0 or "AlreadyExists" in created.stderr, created.stderr
    kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=30s",
        "crd/servicemonitors.monitoring.coreos.com",
        "crd/kopfpeerings.kopf.dev",
        "crd/clusterkopfpeerings.kopf.dev",
    )
    yield
    if made_service_monitor:
        kubectl("delete", "crd", "servicemonitors.monitoring.coreos.com", "--wait=false")


# -- lint and render ------------------------------------------------------------


@pytest.mark.parametrize("values", [None, CI_VALUES], ids=["default", "ha-metrics"])
def test_chart_lints_strictly(helm: Helm, values: Path | None) -> None:
    result = helm("lint", "--strict", str(CHART), *(["-f", str(values)] if values else []))
    assert "0 chart(s) failed" in result.stdout


def test_schema_rejects_unknown_and_invalid_values(helm: Helm) -> None:
    for bad in (
        "replica=2",
        "image.tags=x",
        "metrics.serviceMonitor.intervall=1m",
        "replicas=-1",
        "peeringLifetimeSeconds=5",
    ):
        result = helm("template", "x", str(CHART), "--set", bad, check=False)
        assert result.returncode != 0, f"--set {bad} was accepted"
        assert "values don't meet the specifications of the schema" in result.stderr, result.stderr


@pytest.mark.parametrize("ha", [False, True], ids=["default", "ha-metrics"])
def test_rendered_chart_is_accepted_by_the_api_server(
    helm: Helm, kubectl: Kubectl, chart_crds: None, namespace: str, ha: bool
) -> None:
    release = f"dry{secrets.token_hex(3)}"
    args = ["-f", str(CI_VALUES), "--set", f"watchNamespaces={{{namespace},default}}"] if ha else []
    docs = helm.template(release, namespace, *args)
    kinds = sorted(d["kind"] for d in docs)
    # The operator's ClusterRole, binding, Deployment and ServiceAccount; the
    # worker and pool ClusterRoles, and per worker namespace a ServiceAccount
    # and RoleBinding of each; the metrics Service; the worker lease policy.
    expected = [
        *("ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding", "Deployment"),
        *("RoleBinding", "RoleBinding", "Service"),
        *("ServiceAccount", "ServiceAccount", "ServiceAccount"),
        *("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"),
        # The admission webhook: its certificate, Service and configuration.
        *("Secret", "Service", "ValidatingWebhookConfiguration"),
    ]
    if ha:
        # Per watched namespace: operator Role + RoleBinding, worker and pool
        # SAs + RoleBindings, a KopfPeering; plus the dashboard, PDB,
        # ServiceMonitor.
        expected += ["ConfigMap", "KopfPeering", "KopfPeering", "PodDisruptionBudget"]
        expected += ["Role", "Role", "RoleBinding", "RoleBinding", "RoleBinding", "RoleBinding"]
        expected += ["ServiceAccount", "ServiceAccount", "ServiceMonitor"]
    assert kinds == sorted(expected)
    for doc in docs:
        assert doc["metadata"]["labels"][INSTANCE] == release, doc["metadata"]["name"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert len(doc["metadata"]["name"]) <= 63
    applied = kubectl(
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        input="\n---\n".join(json.dumps(d) for d in docs),
        check=False,
    )
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.count("(server dry run)") == len(docs), applied.stdout


def test_long_release_names_are_cut_to_63_characters(helm: Helm) -> None:
    release = "r" * 53  # Helm's own limit for release names
    for doc in helm.template(release, "ns", "-f", str(CI_VALUES)):
        name = doc["metadata"]["name"]
        assert len(name) <= 63, name
        assert not name.endswith("-"), name


def test_deployment_is_locked_down(helm: Helm) -> None:
    docs = helm.template("lh", "ns", "--set", "watchNamespaces={a,b}")
    pod = find(docs, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["leasehold", "operator"]
    args = container["args"]
    assert args[args.index("--expiry-margin-seconds") + 1] == "1"
    assert args[args.index("--liveness-endpoint") + 1] == "http://0.0.0.0:8080/healthz"
    assert [args[i + 1] for i, a in enumerate(args) if a == "--namespace"] == ["a", "b"]
    assert "--peering" not in args
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": 9090, "webhook": 9443}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["LEASEHOLD_METRICS_PORT"] == "9090"
    assert env["LEASEHOLD_WEBHOOK_PORT"] == "9443"
    assert {"name": "webhook-tls", "mountPath": "/etc/leasehold/webhook", "readOnly": True} in (
        container["volumeMounts"]
    )
    assert container["resources"]["limits"]["memory"]
    # rollingUpdate: null drops what an earlier RollingUpdate left (HA back to one replica).
    assert find(docs, "Deployment")["spec"]["strategy"] == {
        "type": "Recreate",
        "rollingUpdate": None,
    }
    assert "affinity" not in pod


def test_rbac_is_least_privilege(helm: Helm) -> None:
    clusterwide = helm.template("lh", "ns")
    role = find(clusterwide, "ClusterRole", "lh-leasehold-operator")
    assert rules_of(role) == {*OPERATOR_RULES, *KUEUE_CLUSTER_RULES, CRD_RULE}
    assert not [d for d in clusterwide if d["kind"] in ("Role", "KopfPeering")]

    namespaced = helm.template("lh", "ns", "-f", str(CI_VALUES), "--set", "watchNamespaces={a,b}")
    cluster_role = find(namespaced, "ClusterRole", "lh-leasehold-operator")
    assert rules_of(cluster_role) == {
        CRD_RULE,
        *KUEUE_CLUSTER_RULES,
        ("", "namespaces", ("get", "list", "watch"), ()),
    }
    roles = [d for d in namespaced if d["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["a", "b"]
    for role in roles:
        assert rules_of(role) == {
            *OPERATOR_RULES,
            ("kopf.dev", "kopfpeerings", ("list", "watch"), ()),
            ("kopf.dev", "kopfpeerings", ("get", "patch"), ("lh-leasehold",)),
        }

    # The chart's worker and pool ClusterRoles are deploy/rbac/'s: a push
    # attempt's pod only gets and patches; only a pool lists, watches, claims.
    for kind, verbs in (("worker", ("get", "patch")), ("pool", POOL_VERBS)):
        standalone = yaml.safe_load(
            (REPO / "deploy" / "rbac" / f"{kind}-clusterrole.yaml").read_text()
        )
        rendered = find(clusterwide, "ClusterRole", f"lh-leasehold-{kind}")
        assert (
            rules_of(rendered)
            == rules_of(standalone)
            == {("leasehold.dev", "jobleases", verbs, ())}
        )
        assert find(helm.template("leasehold", "ns"), "ClusterRole", f"leasehold-{kind}")


def test_ha_pods_get_distinct_peering_priorities(helm: Helm, tmp_path: Path) -> None:
    docs = helm.template("lh", "ns", "-f", str(CI_VALUES))
    container = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[args.index("--peering") + 1] == "lh-leasehold"
    assert args[args.index("--peering-lifetime-seconds") + 1] == "60"
    quick = helm.template("lh", "ns", "-f", str(CI_VALUES), "--set", "peeringLifetimeSeconds=20")
    quick_args = find(quick, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert quick_args[quick_args.index("--peering-lifetime-seconds") + 1] == "20"
    assert find(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    deployment = find(docs, "Deployment")["spec"]
    # No surge: with a required anti-affinity and as many nodes as replicas, a
    # surge pod would find no node and the rollout would hang.
    assert deployment["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    spread = deployment["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = spread["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == deployment["selector"]["matchLabels"]
    own = helm.template("lh", "ns", "-f", str(CI_VALUES), "--set", "affinity.x=1")
    assert find(own, "Deployment")["spec"]["template"]["spec"]["affinity"] == {"x": 1}
    # Run the container's command as a kubelet would, with a stand-in
    # `leasehold` that prints its arguments.
    fake = tmp_path / "leasehold"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    priorities = set()
    for pod in ("lh-leasehold-7d4b9c-abcde", "lh-leasehold-7d4b9c-fghij"):
        env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "POD_ID": pod}
        out = subprocess.run(
            [*container["command"], *args], env=env, capture_output=True, text=True, check=True
        ).stdout.split("\n")
        assert out[0] == "operator"
        assert out[1 : 1 + len(args)] == args
        assert out[1 + len(args)] == "--priority"
        priorities.add(int(out[2 + len(args)]))
    assert len(priorities) == 2


def test_webhook_configuration_calls_the_operators_handlers(helm: Helm) -> None:
    docs = helm.template("lh", "ns", "--set", "watchNamespaces={a,b}")
    config = find(docs, "ValidatingWebhookConfiguration")
    secret = find(docs, "Secret", "lh-leasehold-webhook")
    service = find(docs, "Service", "lh-leasehold-webhook")
    paths = {
        hook["rules"][0]["resources"][0]: hook["clientConfig"]["service"]["path"]
        for hook in config["webhooks"]
    }
    assert paths == {
        "leasedjobs": f"/{handlers.WEBHOOK_LEASED_JOB}",
        "leasedcronjobs": f"/{handlers.WEBHOOK_LEASED_CRON_JOB}",
    }
    for hook in config["webhooks"]:
        assert hook["failurePolicy"] == "Ignore"
        assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
        assert hook["clientConfig"]["service"]["name"] == service["metadata"]["name"]
        assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
        values = hook["namespaceSelector"]["matchExpressions"][0]["values"]
        assert values == ["a", "b"]
    strict = helm.template("lh", "ns", "--set", "webhook.failurePolicy=Fail")
    hooks = find(strict, "ValidatingWebhookConfiguration")["webhooks"]
    assert {h["failurePolicy"] for h in hooks} == {"Fail"}
    assert all("namespaceSelector" not in h for h in hooks)  # the whole cluster
    off = helm.template("lh", "ns", "--set", "webhook.enabled=false")
    assert not [d for d in off if d["kind"] in ("ValidatingWebhookConfiguration", "Secret")]
    env = find(off, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert "LEASEHOLD_WEBHOOK_PORT" not in {e["name"] for e in env}


# -- install -------------------------------------------------------------------


@dataclass
class Release:
    name: str
    namespace: str
    health_port: int

    @property
    def worker_account(self) -> str:
        return f"{self.name}-leasehold-worker"

    @property
    def pool_account(self) -> str:
        return f"{self.name}-leasehold-pool"

    @property
    def selector(self) -> str:
        return f"{INSTANCE}={self.name}"


@pytest.fixture
def install(
    helm: Helm, kubectl: Kubectl, crds_installed: Path, namespace: str
) -> Iterator[Callable[..., Release]]:
    """Install the chart into the test's namespace, watching only it; uninstall after."""
    installed: list[Release] = []

    def run(*values: str) -> Release:
        release = Release(f"lh{secrets.token_hex(3)}", namespace, free_port())
        helm(
            "install",
            release.name,
            str(CHART),
            "--namespace",
            namespace,
            "--set",
            f"watchNamespaces={{{namespace}}}",
            "--set",
            f"health.port={release.health_port}",
            "--set",
            f"metrics.port={free_port()}",
            "--set",
            "image.repository=ignored-by-the-pod-runner",
            # The pod runner mounts no volumes (the webhook's certificate) and
            # the local control plane has no Service network to call it by:
            # test_admission.py calls the operator's webhook by URL with the
            # chart's configuration, the kind tier through its Service.
            "--set",
            "webhook.enabled=false",
            *[arg for value in values for arg in ("--set", value)],
        )
        installed.append(release)
        return release

    yield run
    for release in installed:
        helm("uninstall", release.name, "--namespace", namespace, "--wait", check=False)


def operator_pod(kubectl: Kubectl, release: Release) -> str:
    pods = kubectl.json("get", "pods", "-n", release.namespace, "-l", release.selector)["items"]
    return str(pods[0]["metadata"]["name"]) if pods else ""


def healthz(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def leftovers(kubectl: Kubectl, release: Release) -> list[str]:
    kinds = (
        "deployments,replicasets,pods,services,serviceaccounts,roles,rolebindings,"
        "configmaps,poddisruptionbudgets,secrets"
    )
    cluster_kinds = (
        "clusterroles,clusterrolebindings,validatingadmissionpolicies,"
        "validatingadmissionpolicybindings,validatingwebhookconfigurations"
    )
    found = []
    for args in (("-n", release.namespace, kinds), (cluster_kinds,)):
        listed = kubectl.json("get", *args, "-l", release.selector)["items"]
        found += [f"{o['kind']}/{o['metadata']['name']}" for o in listed]
    return found


def test_install_runs_a_leased_job_and_uninstall_cleans_up(
    install: Callable[..., Release],
    helm: Helm,
    kubectl: Kubectl,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    release = install()
    pod = wait_for("the operator pod", lambda: operator_pod(kubectl, release), 30)
    pid = local_pod_runner.wait_for_pid(namespace, pod, 30)
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    # `leasehold operator ...` (a console script: python runs .venv/bin/leasehold).
    at = argv.index("operator")
    assert Path(argv[at - 1]).name == "leasehold", argv
    assert argv[argv.index("--namespace") + 1] == namespace, argv
    wait_for("the operator's /healthz", lambda: healthz(release.health_port), 30)

    script = "echo working under token $LEASEHOLD_FENCING_TOKEN; sleep 1"
    job = {
        "apiVersion": names.API_VERSION,
        "kind": "LeasedJob",
        "metadata": {"name": "hello", "namespace": namespace},
        "spec": {
            "leaseDurationSeconds": 3,
            "template": {
                "spec": {
                    "serviceAccountName": release.worker_account,
                    "containers": [
                        {
                            "name": "worker",
                            "image": "ignored",
                            "command": ["leasehold", "run", "--", "sh", "-c", script],
                        }
                    ],
                }
            },
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(job))
    custom = client.CustomObjectsApi(api_client)

    def status() -> dict[str, Any]:
        body: Any = custom.get_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, "leasedjobs", "hello"
        )
        return dict(body.get("status") or {})

    try:
        wait_for("Succeeded", lambda: status().get("phase") == "Succeeded", 45)
    finally:
        operator_log = local_pod_runner.log(namespace, pod)
        print(operator_log)
    assert status()["completion"]["fencingToken"] == 1
    assert "working under token 1" in local_pod_runner.log(namespace, "hello-1")
    # The operator ran on its own pod-bound token: no permission was missing.
    complaints = re.findall(
        r".*(?:[Ff]orbidden|Not enough permissions|HTTP 403|status=403).*", operator_log
    )
    assert complaints == []

    assert len(leftovers(kubectl, release)) >= 10
    helm("uninstall", release.name, "--namespace", namespace, "--wait", "--timeout", "60s")
    wait_for("the operator process to stop", lambda: local_pod_runner.pid(namespace, pod) is None)
    wait_for("nothing left", lambda: leftovers(kubectl, release) == [], 30)
    assert helm("status", release.name, "-n", namespace, check=False).returncode != 0


def test_webhook_certificate_is_kept_across_upgrades(
    install: Callable[..., Release], helm: Helm, kubectl: Kubectl, namespace: str
) -> None:
    """The Helm-made certificate is read back with `lookup`: an upgrade keeps it and the CA."""
    release = install("replicas=0", "webhook.enabled=true")
    secret_name = f"{release.name}-leasehold-webhook"

    def stored() -> tuple[str, str, str]:
        secret = kubectl.json("get", "secret", "-n", namespace, secret_name)["data"]
        config = kubectl.json("get", "validatingwebhookconfiguration", f"{release.name}-leasehold")
        bundles = {hook["clientConfig"]["caBundle"] for hook in config["webhooks"]}
        assert bundles == {secret["ca.crt"]}
        return secret["ca.crt"], secret["tls.crt"], secret["tls.key"]

    first = stored()
    helm("upgrade", release.name, str(CHART), "-n", namespace, "--reuse-values")
    assert stored() == first
    kubectl("delete", "secret", "-n", namespace, secret_name)
    helm("upgrade", release.name, str(CHART), "-n", namespace, "--reuse-values")
    renewed = stored()
    assert renewed[0] != first[0] and renewed[1] != first[1]
    helm("uninstall", release.name, "--namespace", namespace, "--wait", "--timeout", "60s")
    # What Helm did not make itself (a Deployment's ReplicaSet) the garbage collector takes.
    wait_for("nothing left", lambda: leftovers(kubectl, release) == [], 30)


# -- worker confinement ----------------------------------------------------------


def token_kubeconfig(admin: Path, token: str, namespace: str, path: Path) -> Path:
    """A kubeconfig for the same cluster that authenticates with ``token`` only."""
    conf = yaml.safe_load(admin.read_text())
    context = next(c for c in conf["contexts"] if c["name"] == conf["current-context"])
    context["context"] = {**context["context"], "user": "token", "namespace": namespace}
    conf["contexts"] = [context]
    conf["users"] = [{"name": "token", "user": {"token": token}}]
    path.write_text(yaml.safe_dump(conf))
    return path


def test_pool_token_is_confined_to_its_own_lease(
    install: Callable[..., Release],
    kubectl: Kubectl,
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
) -> None:
    # No operator is needed: leases are made by the admin, who is not pod-bound.
    release = install("replicas=0")
    account = f"system:serviceaccount:{namespace}:{release.pool_account}"
    for lease, mode in (("lease-a", "Pull"), ("lease-b", "Pull"), ("lease-push", "Push")):
        body = {
            "apiVersion": names.API_VERSION,
            "kind": "JobLease",
            "metadata": {"name": lease, "namespace": namespace},
            "spec": {
                "jobName": lease,
                "leaseDurationSeconds": 600,
                "maxFencingToken": 5,
                "mode": mode,
            },
        }
        kubectl("create", "-f", "-", input=json.dumps(body))
    worker_policy_in_effect(kubectl, namespace, release.pool_account, "lease-a")

    # Two worker pods that never run; tokens bound to each, as a kubelet mounts them.
    kubeconfigs: dict[str, Path] = {}
    uids: dict[str, str] = {}
    manifests: dict[str, dict[str, Any]] = {}
    for pod in ("worker-a", "worker-b"):
        manifests[pod] = manifest = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod, "namespace": namespace},
            "spec": {
                "serviceAccountName": release.pool_account,
                "schedulingGates": [{"name": "leasehold.dev/never"}],
                "containers": [{"name": "w", "image": "ignored", "command": ["true"]}],
            },
        }
        uids[pod] = kubectl.json("create", "-f", "-", input=json.dumps(manifest))["metadata"]["uid"]
        token = kubectl(
            *("create", "token", release.pool_account, "-n", namespace),
            *("--bound-object-kind", "Pod", "--bound-object-name", pod),
        ).stdout.strip()
        kubeconfigs[pod] = token_kubeconfig(kubeconfig, token, namespace, tmp_path / pod)
    as_b = Kubectl(kubectl.binary, kubeconfigs["worker-b"])
    whoami = as_b.json("auth", "whoami")["status"]["userInfo"]
    assert whoami["username"] == account
    assert whoami["extra"]["authentication.kubernetes.io/pod-name"] == ["worker-b"]

    # RBAC, as `kubectl auth can-i` sees it (the admission policy is not part of it).
    def can(verb: str, resource: str, ns: str = namespace) -> bool:
        answer = kubectl("auth", "can-i", verb, resource, "-n", ns, "--as", account, check=False)
        return answer.stdout.strip() == "yes"

    allowed = [(verb, "jobleases") for verb in POOL_VERBS]
    denied = [
        *[(v, "leasedjobs") for v in ("get", "list", "create", "patch", "delete")],
        *[(v, "leasedcronjobs") for v in ("get", "list", "create", "patch", "delete")],
        ("patch", "leasedjobs/status"),
        *[(v, "pods") for v in ("get", "list", "create", "delete")],
        ("create", "jobleases"),
        ("delete", "jobleases"),
        ("update", "jobleases/status"),
        ("create", "serviceaccounts/token"),
    ]
    assert [(v, r) for v, r in allowed if not can(v, r)] == []
    assert [(v, r) for v, r in denied if can(v, r)] == []
    assert not can("patch", "jobleases", "default")

    # Real requests with the tokens: the SDK's own store, then raw kubectl.
    def store(pod: str) -> LeaseStore:
        return LeaseStore(config.new_client_from_config(config_file=str(kubeconfigs[pod])))

    store_a, store_b = store("worker-a"), store("worker-b")
    claimed = store_a.claim(namespace, "lease-a", "worker-a", holder_uid=uids["worker-a"])
    assert isinstance(claimed, Accepted), claimed
    assert isinstance(store_a.renew(namespace, "lease-a", "worker-a", claimed.token), Accepted)

    def refused(call: Callable[[], object]) -> str:
        with pytest.raises(StoreError) as caught:
            call()
        assert caught.value.status == 403, caught.value
        return str(caught.value)

    # No worker creates a lease, held by itself or not: only the operator does
    # (a job's first lease is created held by its pod; RBAC gives workers no
    # create, and the worker policy refuses any worker's CREATE as well).
    for held_by in (HeldBy("worker-b", uids["worker-b"], 1), None):
        refused(
            lambda held_by=held_by: store_b.create(  # type: ignore[misc]
                namespace,
                "lease-new",
                job_name="lease-new",
                lease_duration_seconds=600,
                max_fencing_token=5,
                mode=LeaseMode.PUSH,
                held_by=held_by,
            )
        )

    # B holds nothing: it may not renew, complete or release A's lease, even
    # naming A as the holder with A's token (RBAC alone would allow it).
    message = refused(lambda: store_b.renew(namespace, "lease-a", "worker-a", claimed.token))
    assert "is held by worker-a" in message
    refused(lambda: store_b.release(namespace, "lease-a", "worker-a", claimed.token))
    # B may not claim an unheld lease for someone else ...
    assert "claim an unheld one as itself" in refused(
        lambda: store_b.claim(namespace, "lease-b", "worker-a", holder_uid=uids["worker-b"])
    )
    # ... nor claim without binding the lease to its own pod UID ...
    assert "is not the holder" in refused(lambda: store_b.claim(namespace, "lease-b", "worker-b"))
    assert "is not the holder" in refused(
        lambda: store_b.claim(namespace, "lease-b", "worker-b", holder_uid=uids["worker-a"])
    )
    # ... nor claim a push-mode lease (the operator claims those) ...
    assert "only pull-mode leases" in refused(
        lambda: store_b.claim(namespace, "lease-push", "worker-b", holder_uid=uids["worker-b"])
    )
    # A push-mode lease the operator claimed for pod worker-a, not yet bound:
    # worker-a may not bind it (as a renewal binding its own UID would), nor
    # renew it unbound; once the operator bound it to worker-a's UID, it may.
    admin = LeaseStore(config.new_client_from_config(config_file=str(kubeconfig)))
    pushed = admin.claim(namespace, "lease-push", "worker-a")
    assert isinstance(pushed, Accepted) and pushed.lease.record.holder_uid is None, pushed
    binding = ("--type=merge", "-p", json.dumps({"spec": {"holderUID": uids["worker-a"]}}))
    as_a = Kubectl(kubectl.binary, kubeconfigs["worker-a"])
    result = as_a("patch", "joblease", "lease-push", *binding, check=False)
    assert result.returncode != 0 and "not yet bound to a pod" in result.stderr, result.stderr
    assert "not yet bound to a pod" in refused(
        lambda: store_a.renew(namespace, "lease-push", "worker-a", pushed.token)
    )
    assert admin.get(namespace, "lease-push").record.holder_uid is None
    bound = admin.bind(namespace, "lease-push", "worker-a", pushed.token, uids["worker-a"])
    assert isinstance(bound, Accepted), bound
    renewal = store_a.renew(
        namespace, "lease-push", "worker-a", pushed.token, holder_uid=uids["worker-a"]
    )
    assert isinstance(renewal, Accepted), renewal
    # ... only a pull-mode lease for itself; then it may renew and release it.
    mine = store_b.claim(namespace, "lease-b", "worker-b", holder_uid=uids["worker-b"])
    assert isinstance(mine, Accepted), mine
    assert isinstance(store_b.renew(namespace, "lease-b", "worker-b", mine.token), Accepted)
    assert store_a.get(namespace, "lease-a").record.holder_identity == "worker-a"

    def forbidden(*args: str) -> str:
        result = as_b(*args, check=False)
        assert result.returncode != 0, f"kubectl {shlex.join(args)} was allowed"
        assert "forbidden" in result.stderr.lower(), result.stderr
        return result.stderr

    merge = ("--type=merge", "-p", '{"spec":{"renewTime":"2026-01-01T00:00:00.000000Z"}}')
    assert "ValidatingAdmissionPolicy" in forbidden("patch", "joblease", "lease-a", *merge)
    forbidden("delete", "joblease", "lease-a")
    forbidden("get", "leasedjobs")
    forbidden("patch", "leasedjob", "lease-a", *merge)
    forbidden("get", "pods")
    forbidden("delete", "pod", "worker-a")
    forbidden("run", "sneaky", "--image=x", "--restart=Never")
    forbidden("get", "jobleases", "-n", "default")
    # The holder itself may change only the protocol's fields of its lease.
    changes: list[dict[str, Any]] = [
        {"metadata": {"labels": {"pool": "mine"}}},
        {"metadata": {"finalizers": ["example.com/keep"]}},
        {"metadata": {"annotations": {"note": "mine"}}},
        # Nor forge the operator's note of a reclaim (read to skip the wait
        # for an earlier hold): it is written only by the reclaim itself.
        {
            "metadata": {
                "annotations": {
                    names.ANNOTATION_RECLAIMED_TOKEN: "1",
                    names.ANNOTATION_RECLAIM_REASON: "LeaseExpired",
                }
            }
        },
        {
            "metadata": {
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1-2-3"}
                ]
            }
        },
    ]
    for change in changes:
        patch = ("--type=merge", "-p", json.dumps(change))
        refusal = forbidden("patch", "joblease", "lease-b", *patch)
        # OwnerReferencesPermissionEnforcement (on in the local control plane)
        # may refuse an ownerReference first; the policy refuses it regardless.
        assert "may not change the metadata" in refusal or "ownerRef" in refusal, refusal
    lower_cap = ("--type=merge", "-p", '{"spec":{"maxFencingToken":2}}')
    assert "may change only" in forbidden("patch", "joblease", "lease-b", *lower_cap)
    # Nor suspend its own lease (a release the operator would count as a suspension).
    suspend = {"spec": {"suspended": True, "holderIdentity": None, "holderUID": None}}
    suspend_own = ("--type=merge", "-p", json.dumps(suspend))
    assert "suspend or resume" in forbidden("patch", "joblease", "lease-b", *suspend_own)
    for work in ({"priority": 7}, {"params": {"evil": True}}):
        own_work = ("--type=merge", "-p", json.dumps({"spec": work}))
        assert "the work it carries" in forbidden("patch", "joblease", "lease-b", *own_work)
    for spec in ({"leaseDurationSeconds": 1}, {"mode": "Push"}, {"failures": 1}):  # CRD rules first
        forbidden("patch", "joblease", "lease-b", "--type=merge", "-p", json.dumps({"spec": spec}))
    renewed = ("--type=merge", "-p", '{"spec":{"renewTime":"2026-01-01T00:00:01.000000Z"}}')
    as_b("patch", "joblease", "lease-b", *renewed)

    # A token that names no pod (a plain TokenRequest, like a legacy token
    # Secret) gets nothing from RBAC's patch: denied by default.
    unbound = kubectl("create", "token", release.pool_account, "-n", namespace).stdout.strip()
    as_unbound = Kubectl(
        kubectl.binary, token_kubeconfig(kubeconfig, unbound, namespace, tmp_path / "unbound")
    )
    result = as_unbound("patch", "joblease", "lease-b", *renewed, check=False)
    assert result.returncode != 0 and "not bound to a" in result.stderr, result.stderr

    # A pod replaced under the same name (new UID) is not the holder.
    kubectl("delete", "pod", "worker-b", "-n", namespace, "--grace-period=0", "--force")
    kubectl("create", "-f", "-", input=json.dumps(manifests["worker-b"]))
    token = kubectl(
        *("create", "token", release.pool_account, "-n", namespace),
        *("--bound-object-kind", "Pod", "--bound-object-name", "worker-b"),
    ).stdout.strip()
    as_new_b = Kubectl(
        kubectl.binary, token_kubeconfig(kubeconfig, token, namespace, tmp_path / "new-b")
    )
    result = as_new_b("patch", "joblease", "lease-b", *renewed, check=False)
    assert result.returncode != 0 and "is not the holder" in result.stderr, result.stderr

    # The admin (not pod-bound) is not limited by the policy.
    kubectl("patch", "joblease", "lease-a", "-n", namespace, *merge)


# -- push attempt pods: no claim, no list ----------------------------------------


@dataclass
class BoundPod:
    """A pod that never runs, and a token bound to it as a kubelet mounts one."""

    name: str
    uid: str
    kubectl: Kubectl
    store: LeaseStore


def bound_pod(
    kubectl: Kubectl, kubeconfig: Path, namespace: str, account: str, name: str, tmp_path: Path
) -> BoundPod:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "serviceAccountName": account,
            "schedulingGates": [{"name": "leasehold.dev/never"}],
            "containers": [{"name": "w", "image": "ignored", "command": ["true"]}],
        },
    }
    uid = kubectl.json("create", "-f", "-", input=json.dumps(manifest))["metadata"]["uid"]
    token = kubectl(
        *("create", "token", account, "-n", namespace),
        *("--bound-object-kind", "Pod", "--bound-object-name", name),
    ).stdout.strip()
    path = token_kubeconfig(kubeconfig, token, namespace, tmp_path / name)
    store = LeaseStore(config.new_client_from_config(config_file=str(path)))
    return BoundPod(name, uid, Kubectl(kubectl.binary, path), store)


def worker_policy_in_effect(kubectl: Kubectl, namespace: str, account: str, lease: str) -> None:
    """Wait until the API server enforces the chart's worker lease policy.

    The admission plugin loads a new ValidatingAdmissionPolicy and its binding
    from its informers a moment after ``helm install`` returns: a refusal
    asserted at once may be let through. The probe is a server-side dry run
    of a patch by ``account`` with a token not bound to a pod, which the
    policy refuses and RBAC allows.
    """
    as_account = f"system:serviceaccount:{namespace}:{account}"
    label = json.dumps({"metadata": {"labels": {"leasehold.dev/probe": "policy"}}})

    def refused() -> bool:
        result = kubectl(
            *("patch", "joblease", lease, "-n", namespace, "--as", as_account),
            *("--dry-run=server", "--type=merge", "-p", label),
            check=False,
        )
        return result.returncode != 0 and "ValidatingAdmissionPolicy" in result.stderr

    wait_for("the worker lease policy in effect", refused, 30)


def create_leases(kubectl: Kubectl, namespace: str, modes: dict[str, str], account: str) -> None:
    """Create unheld leases (name: mode) as the admin; return once ``account`` is policed."""
    for lease, mode in modes.items():
        spec = {"jobName": lease, "leaseDurationSeconds": 600, "maxFencingToken": 5, "mode": mode}
        body = {
            "apiVersion": names.API_VERSION,
            "kind": "JobLease",
            "metadata": {"name": lease, "namespace": namespace},
            "spec": spec,
        }
        kubectl("create", "-f", "-", input=json.dumps(body))
    worker_policy_in_effect(kubectl, namespace, account, next(iter(modes)))


def pushed_to(admin: LeaseStore, namespace: str, lease: str, pod: BoundPod) -> int:
    """Claim a push lease for ``pod`` and bind it, as the operator does for the pod it made."""
    claimed = admin.claim(namespace, lease, pod.name)
    assert isinstance(claimed, Accepted), claimed
    bound = admin.bind(namespace, lease, pod.name, claimed.token, pod.uid)
    assert isinstance(bound, Accepted), bound
    return claimed.token


def test_a_push_pod_may_not_claim_any_lease(
    install: Callable[..., Release],
    kubectl: Kubectl,
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
) -> None:
    # The pod the operator creates for an attempt runs user code as the worker
    # ServiceAccount; it holds the lease the operator claimed for it, no other.
    release = install("replicas=0")
    create_leases(kubectl, namespace, {"attempt": "Push", "free": "Pull"}, release.worker_account)
    pod = bound_pod(kubectl, kubeconfig, namespace, release.worker_account, "job-1", tmp_path)
    admin = LeaseStore(config.new_client_from_config(config_file=str(kubeconfig)))
    pushed_to(admin, namespace, "attempt", pod)

    with pytest.raises(StoreError) as caught:
        pod.store.claim(namespace, "free", pod.name, holder_uid=pod.uid)
    assert caught.value.status == 403, caught.value
    assert "may not claim JobLease free" in str(caught.value), caught.value
    assert "lacks the claim verb on jobleases" in str(caught.value), caught.value
    assert admin.get(namespace, "free").record.fencing_token == 0


def test_a_push_pod_may_not_list_or_watch_leases(
    install: Callable[..., Release],
    kubectl: Kubectl,
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
) -> None:
    release = install("replicas=0")
    create_leases(kubectl, namespace, {"attempt": "Push", "free": "Pull"}, release.worker_account)
    pod = bound_pod(kubectl, kubeconfig, namespace, release.worker_account, "job-1", tmp_path)
    account = f"system:serviceaccount:{namespace}:{release.worker_account}"
    for verb in ("get", "patch", "list", "watch", "claim"):
        answer = kubectl(
            "auth", "can-i", verb, "jobleases", "-n", namespace, "--as", account, check=False
        )
        assert (answer.stdout.strip() == "yes") == (verb in ("get", "patch")), verb
    leases = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{namespace}/jobleases"
    for query in ("", "?watch=true&timeoutSeconds=1"):
        listed = pod.kubectl("get", "--raw", leases + query, check=False)
        assert listed.returncode != 0, f"{leases}{query}: {listed.stdout}"
        assert "forbidden" in listed.stderr.lower(), listed.stderr
    # It reads its own lease by name (what the SDK's refusal handling does).
    got = pod.kubectl.json("get", "joblease", "attempt")
    assert got["metadata"]["name"] == "attempt"


def test_a_push_pod_renews_completes_and_releases_its_own_lease(
    install: Callable[..., Release],
    kubectl: Kubectl,
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
) -> None:
    release = install("replicas=0")
    create_leases(
        kubectl, namespace, {"done": "Push", "given-back": "Push"}, release.worker_account
    )
    admin = LeaseStore(config.new_client_from_config(config_file=str(kubeconfig)))
    first = bound_pod(kubectl, kubeconfig, namespace, release.worker_account, "done-1", tmp_path)
    token = pushed_to(admin, namespace, "done", first)
    renewed = first.store.renew(namespace, "done", first.name, token, holder_uid=first.uid)
    assert isinstance(renewed, Accepted), renewed
    done = first.store.complete(
        namespace, "done", first.name, token, Outcome.SUCCEEDED, holder_uid=first.uid
    )
    assert isinstance(done, Accepted), done
    other = bound_pod(kubectl, kubeconfig, namespace, release.worker_account, "back-1", tmp_path)
    token = pushed_to(admin, namespace, "given-back", other)
    given = other.store.release(namespace, "given-back", other.name, token, holder_uid=other.uid)
    assert isinstance(given, Accepted), given
    assert admin.get(namespace, "given-back").record.holder_identity is None


def test_a_holder_may_not_remove_or_rewrite_its_acquire_time(
    install: Callable[..., Release],
    kubectl: Kubectl,
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
) -> None:
    # The operator's take-over and resume read spec.acquireTime to know a hold
    # may still run (protocol.hold_may_outlive): a holder must not erase it.
    release = install("replicas=0")
    create_leases(kubectl, namespace, {"attempt": "Push"}, release.worker_account)
    pod = bound_pod(kubectl, kubeconfig, namespace, release.worker_account, "job-1", tmp_path)
    admin = LeaseStore(config.new_client_from_config(config_file=str(kubeconfig)))
    pushed_to(admin, namespace, "attempt", pod)
    for acquired in (None, "2020-01-01T00:00:00.000000Z"):
        patch = json.dumps({"spec": {"acquireTime": acquired}})
        result = pod.kubectl(
            "patch", "joblease", "attempt", "--type=merge", "-p", patch, check=False
        )
        assert result.returncode != 0, f"acquireTime={acquired} was accepted"
        assert "spec.acquireTime" in result.stderr, result.stderr
    assert admin.get(namespace, "attempt").record.acquire_time is not None


def test_a_pool_pod_lists_and_claims_the_next_free_lease(
    install: Callable[..., Release],
    kubectl: Kubectl,
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The pull-mode flow of a pool pod: one LIST, then a claim bound to its pod.
    release = install("replicas=0")
    create_leases(kubectl, namespace, {"attempt": "Push", "free": "Pull"}, release.pool_account)
    pod = bound_pod(kubectl, kubeconfig, namespace, release.pool_account, "pool-1", tmp_path)
    monkeypatch.setenv(names.ENV_POD_UID, pod.uid)
    holder = worker.claim_any(namespace, pod.name, store=pod.store)
    assert holder is not None
    try:
        assert holder.lease_name == "free"
        done = holder.complete(Outcome.SUCCEEDED)
    finally:
        holder.close()
    assert isinstance(done, Accepted), done
    lease = LeaseStore(config.new_client_from_config(config_file=str(kubeconfig))).get(
        namespace, "free"
    )
    assert lease.record.completion is not None and lease.record.holder_uid is None
