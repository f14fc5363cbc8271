"""A worker for tests/kind/test_kueue.py: fenced writes to a ConfigMap step after step, then done.

Run in a LeasedJob's pod (push mode: the lease claimed for it, its token in
``LEASEHOLD_FENCING_TOKEN``) as ``python /scripts/fenced_worker.py``. Under
token 1 it works for ``TOKEN_1_SECONDS`` (long: it is meant to be preempted),
under any later token for ``WORK_SECONDS``. Each step is a write to the
ConfigMap ``TARGET`` (labelled ``leasehold.dev/fenced: "true"``, so the
fencing ValidatingAdmissionPolicy judges it) carrying its token and its
fencing domain (the lease's name). It does NOT check its lease before a
write: a write is in flight when its node freezes, and only the target can
refuse it. When a write is refused it stops and still reports its completion
to the lease store, which decides whether it counts.

What happened goes to stdout and, so that it outlives the pod, to the
ConfigMap ``REPORT`` (an unfenced object): keys ``token-N-write`` and
``token-N-completion``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from leasehold.fencing.kube import fenced_patch
from leasehold.worker import Accepted, LeaseHolder, Outcome

NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
STEP_SECONDS = 0.2


def say(message: str) -> None:
    """Print one line in a single write."""
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def report(core: client.CoreV1Api, namespace: str, key: str, value: str) -> None:
    """Note ``key: value`` in the REPORT ConfigMap (best effort)."""
    try:
        core.patch_namespaced_config_map(os.environ["REPORT"], namespace, {"data": {key: value}})
    except ApiException as exc:
        say(f"report {key} failed: {exc.status}")


def main() -> int:
    """Write under the lease's token until done or refused; complete. Returns the exit code."""
    holder = LeaseHolder.from_env().start()
    token = int(holder.token)
    lease = os.environ["LEASEHOLD_LEASE"]
    namespace = NAMESPACE_FILE.read_text().strip()
    config.load_incluster_config()
    core = client.CoreV1Api()
    seconds = float(os.environ["TOKEN_1_SECONDS" if token == 1 else "WORK_SECONDS"])
    say(f"working under fencing token {token} for {seconds:g}s")
    outcome = Outcome.SUCCEEDED
    deadline = time.monotonic() + seconds
    step = 0
    while time.monotonic() < deadline:
        step += 1
        patch = fenced_patch(token, {"data": {"writer": f"token {token} step {step}"}}, lease)
        try:
            core.patch_namespaced_config_map(os.environ["TARGET"], namespace, patch)
        except ApiException as exc:
            reason = f"{exc.status}: {exc.body}"
            say(f"write under fencing token {token} REFUSED by the target: {reason}")
            report(core, namespace, f"token-{token}-write", f"REFUSED {reason}")
            outcome = Outcome.FAILED
            break
        if step == 1:
            say(f"first write under fencing token {token} accepted")
            report(core, namespace, f"token-{token}-write", "accepted")
        time.sleep(STEP_SECONDS)
    result = holder.complete(outcome, message=f"{step} steps")
    holder.close()
    if isinstance(result, Accepted):
        say(f"completed {outcome} under fencing token {token}")
        report(core, namespace, f"token-{token}-completion", "accepted")
        return 0
    say(f"completion under fencing token {token} REJECTED by the lease store: {result.rejection}")
    report(core, namespace, f"token-{token}-completion", f"REJECTED {result.rejection}")
    return 75


if __name__ == "__main__":
    sys.exit(main())
