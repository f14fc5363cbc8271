"""The official client's watch on JobLeases, one dict update per event: a watch's floor.

Why this script exists: it is what any watch-based design must pay per
renewal, next to which the operator's CPU per renewal is judged. It also
measures the watch lag (a renewal's ``renewTime`` to this process seeing
the event) the way the operator does, to tell the API server's share of the
operator's lag from the operator's own.

Usage: ``plain_watch.py KUBECONFIG NAMESPACE LAG_FILE``. SIGUSR1 starts a
lag window; SIGTERM writes the window's lags (seconds, a JSON list) to
``LAG_FILE`` and exits.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config, watch

from leasehold import names


def main(argv: Sequence[str]) -> int:
    """Watch until SIGTERM; ``argv`` as in the module's usage."""
    kubeconfig, namespace, lag_file = argv[1:4]
    api = config.new_client_from_config(config_file=kubeconfig)
    custom = client.CustomObjectsApi(api)
    seen: dict[str, tuple[Any, Any]] = {}
    lags: list[float] = []
    recording = [False]

    def start(*_: Any) -> None:
        lags.clear()
        recording[0] = True

    def finish(*_: Any) -> None:
        with open(lag_file, "w") as out:
            json.dump(lags, out)
        sys.exit(0)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGTERM, finish)
    rv: str | None = None
    while True:
        extra: dict[str, str] = {"resource_version": rv} if rv else {}
        stream = watch.Watch()
        for event in stream.stream(
            custom.list_namespaced_custom_object,
            names.GROUP,
            names.VERSION,
            namespace,
            names.PLURAL_JOB_LEASES,
            timeout_seconds=300,
            **extra,
        ):
            obj = event["object"]
            meta = obj["metadata"]
            seen[meta["uid"]] = (meta.get("generation"), obj["spec"].get("holderIdentity"))
            rv = meta["resourceVersion"]
            renewed = obj["spec"].get("renewTime")
            if recording[0] and renewed and event["type"] == "MODIFIED":
                written = datetime.fromisoformat(renewed.replace("Z", "+00:00"))
                lags.append((datetime.now(UTC) - written).total_seconds())


if __name__ == "__main__":
    sys.exit(main(sys.argv))
