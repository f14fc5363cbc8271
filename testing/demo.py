"""``make demo``: the worked example of ``docs/fencing.md``, live, on a local control plane.

Brings up a real control plane (etcd, kube-apiserver, controller-manager,
scheduler), installs the CRDs and the worker role, starts the pod runner (the
kubelet stand-in) and the operator, applies two LeasedJobs and prints a
timeline:

1. ``hello`` runs ``leasehold run -- sh -c ...`` to completion.
2. ``worked-example`` runs the SDK worker (``examples/worker.py``) under a 4 s
   lease. Its first worker is paused (SIGSTOP) past the lease; the operator
   reclaims the lease and starts token 2; the paused worker resumes and its
   completion under token 1 is rejected by the lease store; token 2 completes.
3. ``indexed-demo`` (``examples/leasedjob-indexed.yaml``) runs four indexes,
   each under a JobLease of its own; index 2's worker is paused past its
   lease: only index 2 is taken back and run again (its token 2), the others
   run on, and the frozen worker's late completion is rejected.

Ends with ``kubectl get leasedjobs,jobleases`` and tears everything down
(``--keep`` leaves it running and prints how to reach it).
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, watch

from leasehold.lease.indexes import index_lease_name
from localcluster import LocalCluster, StateError, tools_bin_dir
from operatorproc import OperatorProcess
from podrunner import PodRunner

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "demo"
START = time.monotonic()


def say(who: str, message: str) -> None:
    """Print one timeline line."""
    print(f"t+{time.monotonic() - START:5.1f}s  {who:<9} {message}", flush=True)


def wait_for(what: str, check: Any, timeout: float) -> Any:
    """Poll ``check`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit(f"demo: timed out after {timeout:g}s waiting for {what}")


def kubectl(kubeconfig: Path, *args: str, input_: str | None = None) -> str:
    """Run the project's kubectl; exit with its stderr on failure."""
    result = subprocess.run(
        [str(tools_bin_dir() / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        input=input_,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout


def watch_leases(api: client.ApiClient, stop: threading.Event) -> None:
    """Print every change of holder, token or completion of the demo's leases."""
    custom = client.CustomObjectsApi(api)
    seen: dict[str, tuple[Any, ...]] = {}
    stream = watch.Watch()
    while not stop.is_set():
        try:
            for event in stream.stream(
                custom.list_namespaced_custom_object,
                "leasehold.dev",
                "v1alpha1",
                NAMESPACE,
                "jobleases",
                timeout_seconds=5,
            ):
                obj = event["object"]
                name, spec = obj["metadata"]["name"], obj["spec"]
                state = (
                    spec.get("holderIdentity"),
                    spec.get("fencingToken"),
                    spec.get("completion"),
                )
                if seen.get(name) == state:
                    continue
                before = seen.get(name)
                seen[name] = state
                holder, token, completion = state
                if completion:
                    say(
                        "lease",
                        f"{name}: COMPLETED {completion['outcome']} by"
                        f" {completion['holderIdentity']} under fencing token"
                        f" {completion['fencingToken']}",
                    )
                elif holder:
                    say("lease", f"{name}: claimed by {holder}, fencing token {token}")
                elif before and before[0]:
                    say("lease", f"{name}: {before[0]} no longer holds it (token {token} kept)")
                else:
                    say("lease", f"{name}: created, unheld, fencing token {token}")
                if stop.is_set():
                    break
        except Exception as exc:  # keep the timeline going across watch hiccups
            if not stop.is_set():
                say("demo", f"(lease watch restarted: {exc})")
                time.sleep(0.5)


def job_phase(api: client.ApiClient, name: str) -> str | None:
    """The job's status.phase."""
    body: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "leasehold.dev", "v1alpha1", NAMESPACE, "leasedjobs", name
    )
    return (body.get("status") or {}).get("phase")


def told(api: client.ApiClient, name: str, reason: str) -> bool:
    """Whether the LeasedJob has an Event of ``reason``.

    The operator posts Events off its reconcile, a moment after the status they go with.
    """
    found = client.CoreV1Api(api).list_namespaced_event(
        NAMESPACE, field_selector=f"involvedObject.kind=LeasedJob,involvedObject.name={name}"
    )
    return any(e.reason == reason for e in found.items)


def holder_token(api: client.ApiClient, name: str) -> tuple[str | None, int]:
    """The lease's holder and token."""
    body: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "leasehold.dev", "v1alpha1", NAMESPACE, "jobleases", name
    )
    return body["spec"].get("holderIdentity"), int(body["spec"].get("fencingToken", 0))


def load_job(path: Path) -> dict[str, Any]:
    """Read an example LeasedJob and point its command at this checkout."""
    body: dict[str, Any] = yaml.safe_load(path.read_text())
    container = body["spec"]["template"]["spec"]["containers"][0]
    container["workingDir"] = str(REPO)
    return body


def run(workdir: Path, keep: bool) -> None:
    """The whole demo."""
    cluster = LocalCluster(workdir / "cluster", stop_with_parent=not keep)
    say("demo", "starting the local control plane (etcd, apiserver, controller-manager, scheduler)")
    kubeconfig = cluster.start()
    runner: PodRunner | None = None
    op: OperatorProcess | None = None
    stop = threading.Event()
    try:
        say("demo", f"control plane ready; KUBECONFIG={kubeconfig}")
        kubectl(kubeconfig, "apply", "--server-side", "-f", str(REPO / "deploy" / "crds"))
        kubectl(
            kubeconfig,
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/leasedjobs.leasehold.dev",
            "crd/jobleases.leasehold.dev",
        )
        kubectl(kubeconfig, "apply", "-f", str(REPO / "deploy" / "rbac"))
        kubectl(kubeconfig, "create", "namespace", NAMESPACE)
        kubectl(
            kubeconfig,
            "-n",
            NAMESPACE,
            "create",
            "rolebinding",
            "leasehold-worker",
            "--clusterrole=leasehold-worker",
            f"--serviceaccount={NAMESPACE}:default",
        )
        say("demo", "CRDs and the worker role installed")
        runner = PodRunner(kubeconfig, workdir / "pods").start()
        op = OperatorProcess(kubeconfig, NAMESPACE, workdir / "operator.log")
        op.start()
        say("demo", f"pod runner and operator running (operator log: {op.log_path})")
        api = config.new_client_from_config(config_file=str(kubeconfig))
        threading.Thread(target=watch_leases, args=(api, stop), daemon=True).start()

        # 1. A plain job through `leasehold run`.
        hello = load_job(REPO / "examples" / "leasedjob-hello.yaml")
        kubectl(kubeconfig, "-n", NAMESPACE, "apply", "-f", "-", input_=yaml.safe_dump(hello))
        say("kubectl", "applied LeasedJob hello (leasehold run -- sh -c '...; sleep 3')")

        # 2. The worked example.
        job = load_job(REPO / "examples" / "leasedjob-worked-example.yaml")
        duration = job["spec"]["leaseDurationSeconds"]
        kubectl(kubeconfig, "-n", NAMESPACE, "apply", "-f", "-", input_=yaml.safe_dump(job))
        say("kubectl", f"applied LeasedJob worked-example (leaseDurationSeconds={duration})")
        first = "worked-example-1"
        pid = runner.wait_for_pid(NAMESPACE, first, timeout=60)
        say("worker", f"{first} running as pid {pid}")
        wait_for("the first renewal", lambda: "working under" in runner.log(NAMESPACE, first), 30)
        time.sleep(1.0)
        runner.pause(NAMESPACE, first)
        paused = time.monotonic()
        say("demo", f"SIGSTOP {first}: paused longer than its {duration}s lease")
        wait_for(
            "the reclaim", lambda: holder_token(api, "worked-example")[0] != first, duration + 10
        )
        say(
            "operator",
            f"reclaimed the lease {time.monotonic() - paused:.1f}s after the pause"
            f" (lease {duration}s + margin {op.margin_seconds:g}s, from the last renewal it saw)",
        )
        wait_for("token 2", lambda: holder_token(api, "worked-example")[1] == 2, 30)
        runner.wait_for_pid(NAMESPACE, "worked-example-2", timeout=30)
        time.sleep(1.0)
        runner.resume(NAMESPACE, first)
        say("demo", f"SIGCONT {first}: the stale worker wakes up and tries to finish")
        code = runner.wait_for_exit(NAMESPACE, first, timeout=40)
        for line in runner.log(NAMESPACE, first).splitlines():
            if "REJECTED" in line or "lease lost" in line or "stop" in line:
                say("worker", f"{first}: {line.strip()}")
        say("worker", f"{first} exited {code}")
        wait_for(
            "worked-example to succeed", lambda: job_phase(api, "worked-example") == "Succeeded", 60
        )
        for line in runner.log(NAMESPACE, "worked-example-2").splitlines():
            if "completed" in line:
                say("worker", f"worked-example-2: {line.strip()}")
        wait_for("hello to succeed", lambda: job_phase(api, "hello") == "Succeeded", 60)

        # 3. An Indexed job: one lease per index; one index's worker freezes.
        indexed_run(kubeconfig, api, runner)
        time.sleep(0.5)
        stop.set()
        print(flush=True)
        print(kubectl(kubeconfig, "-n", NAMESPACE, "get", "leasedjobs,jobleases"), flush=True)
        print(
            kubectl(
                kubeconfig,
                "-n",
                NAMESPACE,
                "get",
                "events",
                "--field-selector",
                "involvedObject.kind=LeasedJob",
                "--sort-by=.metadata.creationTimestamp",
                "-o",
                "custom-columns=OBJECT:.involvedObject.name,TYPE:.type,"
                "REASON:.reason,MESSAGE:.message",
            ),
            flush=True,
        )
        say("demo", f"done in {time.monotonic() - START:.1f}s")
        if keep:
            print(
                f"\nStill running. export KUBECONFIG={kubeconfig}\n"
                f"Stop with: make cluster-down CLUSTER_DIR={workdir / 'cluster'}"
                " (and kill the operator and runner: Ctrl-C here)",
                flush=True,
            )
            while True:
                time.sleep(3600)
    finally:
        stop.set()
        if op is not None:
            op.stop()
        if runner is not None:
            runner.stop()
        if not keep:
            cluster.stop()


def indexed_run(kubeconfig: Path, api: client.ApiClient, runner: PodRunner) -> None:
    """Part 3: an Indexed job whose index 2 freezes past its lease; the others run on."""
    job = load_job(REPO / "examples" / "leasedjob-indexed.yaml")
    name = job["metadata"]["name"]
    duration = job["spec"]["leaseDurationSeconds"]
    kubectl(kubeconfig, "-n", NAMESPACE, "apply", "-f", "-", input_=yaml.safe_dump(job))
    say("kubectl", f"applied Indexed LeasedJob {name} (4 indexes, one JobLease each)")
    frozen = f"{name}-2-1"
    for index in range(4):
        runner.wait_for_pid(NAMESPACE, f"{name}-{index}-1", timeout=90)
    wait_for(
        "index 2's first renewal", lambda: "working under" in runner.log(NAMESPACE, frozen), 60
    )
    time.sleep(1.0)
    runner.pause(NAMESPACE, frozen)
    paused = time.monotonic()
    say("demo", f"SIGSTOP {frozen} (index 2): paused longer than its {duration}s lease")
    lease = functools.partial(index_lease_name, name)
    wait_for("index 2 taken back", lambda: holder_token(api, lease(2))[1] == 2, duration + 60)
    others = ", ".join(f"{index}: {holder_token(api, lease(index))}" for index in (0, 1, 3))
    say(
        "operator",
        f"index 2 reclaimed and claimed for {name}-2-2 under its token 2,"
        f" {time.monotonic() - paused:.1f}s after the pause; the others untouched ({others})",
    )
    runner.wait_for_pid(NAMESPACE, f"{name}-2-2", timeout=60)
    time.sleep(1.0)
    runner.resume(NAMESPACE, frozen)
    say("demo", f"SIGCONT {frozen}: the stale worker of index 2 wakes up and tries to finish")
    code = runner.wait_for_exit(NAMESPACE, frozen, timeout=60)
    for line in runner.log(NAMESPACE, frozen).splitlines():
        if "REJECTED" in line or "lease lost" in line:
            say("worker", f"{frozen}: {line.strip()}")
    say("worker", f"{frozen} exited {code}")
    wait_for(f"{name} to succeed", lambda: job_phase(api, name) == "Succeeded", 120)
    wait_for(f"{name}'s Completed Event", lambda: told(api, name, "Completed"), 30)
    body: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "leasehold.dev", "v1alpha1", NAMESPACE, "leasedjobs", name
    )
    status = body.get("status") or {}
    say(
        "operator",
        f"{name} Succeeded: completedIndexes={status.get('completedIndexes')!r},"
        f" {status.get('completionProgress')} completions, {status.get('attempts')} attempts",
    )


def main() -> int:
    """Parse arguments and run the demo."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path(os.environ.get("LEASEHOLD_CACHE_DIR", Path.home() / ".cache" / "leasehold"))
        / "demo",
        help="where the cluster, pods and logs live",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep everything running at the end (Ctrl-C to stop)"
    )
    args = parser.parse_args()
    try:
        run(args.workdir, args.keep)
    except KeyboardInterrupt:
        return 130
    except StateError as exc:  # e.g. a KEEP=1 demo still up
        down = f"make cluster-down CLUSTER_DIR={args.workdir / 'cluster'}"
        print(f"demo: {exc}\n  stop it with: {down}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
