"""A worker for tests/kind/test_kueue.py: fenced writes to a ConfigMap step after step, then done.

Run in a LeasedJob's pod (push mode: the lease claimed for it, its token in
``LEASEHOLD_FENCING_TOKEN``) as ``python /scripts/fenced_worker.py``. Under
token 1 it works for ``TOKEN_1_SECONDS`` (long: it is meant to be preempted),
under any later token for ``WORK_SECONDS``. Each step is a write to the
ConfigMap ``TARGET`` (labelled ``leasehold.dev/fenced: "true"``, so the
fencing ValidatingAdmissionPolicy judges it) carrying its token and its
fencing domain (the lease's name). It does NOT check its lease before a
write: a write is in flight when its node freezes, and only the target can
refuse it. When a write is refused, or on SIGTERM after the write in flight,
it stops and still reports its completion to the lease store, which decides
whether it counts.

The target is written with credentials of its own (``TARGET_CREDENTIALS``:
a ServiceAccount token Secret's ``token`` and ``ca.crt``), as a database
password would be: the pod's own token is bound to the pod and dies with it,
so a worker whose pod was deleted while its node was frozen is refused by the
API server's authentication before any fence is asked. The lease store is
written with the pod's token (the lease policy allows no other).

What happened goes to stdout and, so that it outlives the pod, to the
ConfigMap ``REPORT`` (an unfenced object, same credentials as the target):
keys ``token-N-write`` and ``token-N-completion``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold.fencing.kube import fenced_patch
from leasehold.worker import Accepted, LeaseHolder, Outcome

NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
TIMEOUT_SECONDS = 5
STEP_SECONDS = 0.2
stopping = False


def on_term(signum: int, frame: object) -> None:
    """Stop after the write in flight (the pod is being deleted)."""
    global stopping
    stopping = True


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


def target_client() -> client.CoreV1Api:
    """A client of the API server with the target's own credentials (not the pod's token)."""
    creds = Path(os.environ["TARGET_CREDENTIALS"])
    cfg = client.Configuration()
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    cfg.host = f"https://{host}:{port}"
    cfg.ssl_ca_cert = str(creds / "ca.crt")
    cfg.api_key = {"authorization": "Bearer " + (creds / "token").read_text().strip()}
    return client.CoreV1Api(client.ApiClient(cfg))


def main() -> int:
    """Write under the lease's token until done or refused; complete. Returns the exit code."""
    signal.signal(signal.SIGTERM, on_term)
    holder = LeaseHolder.from_env().start()
    token = int(holder.token)
    lease = os.environ["LEASEHOLD_LEASE"]
    namespace = NAMESPACE_FILE.read_text().strip()
    core = target_client()
    seconds = float(os.environ["TOKEN_1_SECONDS" if token == 1 else "WORK_SECONDS"])
    say(f"working under fencing token {token} for {seconds:g}s")
    outcome = Outcome.SUCCEEDED
    deadline = time.monotonic() + seconds
    step = 0
    while time.monotonic() < deadline:
        step += 1
        patch = fenced_patch(token, {"data": {"writer": f"token {token} step {step}"}}, lease)
        try:
            core.patch_namespaced_config_map(
                os.environ["TARGET"], namespace, patch, _request_timeout=TIMEOUT_SECONDS
            )
        except ApiException as exc:
            reason = f"{exc.status}: {exc.body}"
            say(f"write under fencing token {token} REFUSED by the target: {reason}")
            report(core, namespace, f"token-{token}-write", f"REFUSED {reason}")
            outcome = Outcome.FAILED
            break
        if step == 1:
            say(f"first write under fencing token {token} accepted")
            report(core, namespace, f"token-{token}-write", "accepted")
        if stopping:
            say(f"asked to stop after step {step}: reporting")
            break
        time.sleep(STEP_SECONDS)
    try:
        result = holder.complete(outcome, message=f"{step} steps")
    except Exception as exc:  # e.g. 401: the pod's token died with its pod
        say(f"completion under fencing token {token} REFUSED: {exc!r}")
        report(core, namespace, f"token-{token}-completion", f"REFUSED {exc!r}")
        return 75
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
