"""Pod status bodies, as a kubelet writes them to ``pods/<name>/status``.

Pure functions: each returns a ``{"status": ...}`` body for a strategic
merge patch (conditions merge by ``type``, container statuses by ``name``,
so conditions other writers added, such as ``DisruptionTarget``, stay).

Only the first container runs; its status is the only container status. The
restart policy is treated as ``Never``: a container that exits ends the pod,
``Succeeded`` for exit code 0 and ``Failed`` otherwise.
"""

from __future__ import annotations

import signal as signals
from collections.abc import Mapping
from typing import Any

from podrunner.podspec import POD_IP

SIGNAL_EXIT_BASE = 128
"""A process killed by signal N exits with 128 + N, as a container runtime reports."""


def _conditions(
    pod: Mapping[str, Any], now: str, *, ready: bool, reason: str | None
) -> list[dict[str, Any]]:
    generation = pod.get("metadata", {}).get("generation")

    def condition(kind: str, status: bool, why: str | None = None) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "type": kind,
            "status": "True" if status else "False",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
        if why:
            entry["reason"] = why
        if generation is not None:
            entry["observedGeneration"] = generation
        return entry

    return [
        condition("PodReadyToStartContainers", True),
        condition("Initialized", True),
        condition("Ready", ready, reason),
        condition("ContainersReady", ready, reason),
        condition("PodScheduled", True),
    ]


def _base(pod: Mapping[str, Any], phase: str, started_at: str) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": phase,
        "hostIP": POD_IP,
        "hostIPs": [{"ip": POD_IP}],
        "podIP": POD_IP,
        "podIPs": [{"ip": POD_IP}],
        "startTime": started_at,
    }
    generation = pod.get("metadata", {}).get("generation")
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def _container(pod: Mapping[str, Any]) -> tuple[str, str]:
    containers = pod.get("spec", {}).get("containers") or [{}]
    first = containers[0]
    return str(first.get("name", "")), str(first.get("image", ""))


def running_status(
    pod: Mapping[str, Any], *, pid: int, started_at: str, now: str
) -> dict[str, Any]:
    """Build the status of a pod whose process has started.

    Args:
        pod: The pod object.
        pid: The process id (``containerID`` is ``local://<pid>``).
        started_at: When the process started (RFC 3339).
        now: The current time (RFC 3339).

    Returns:
        The patch body: phase Running, Ready, container running.
    """
    name, image = _container(pod)
    status = _base(pod, "Running", started_at)
    status["conditions"] = _conditions(pod, now, ready=True, reason=None)
    status["containerStatuses"] = [
        {
            "name": name,
            "image": image,
            "imageID": "",
            "containerID": f"local://{pid}",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": started_at}},
            "lastState": {},
        }
    ]
    return {"status": status}


def exit_details(returncode: int) -> tuple[int, int | None]:
    """Turn a `subprocess.Popen.returncode` into a container exit code and signal.

    Args:
        returncode: The return code; negative ``-N`` when killed by signal N.

    Returns:
        ``(exitCode, signal)``: ``(128 + N, N)`` for a signal, else ``(code, None)``.
    """
    if returncode < 0:
        return SIGNAL_EXIT_BASE - returncode, -returncode
    return returncode, None


def terminated_status(
    pod: Mapping[str, Any],
    *,
    pid: int,
    returncode: int,
    started_at: str,
    finished_at: str,
    message: str | None = None,
) -> dict[str, Any]:
    """Build the status of a pod whose process has exited.

    Args:
        pod: The pod object.
        pid: The process id it had.
        returncode: `subprocess.Popen.returncode` (negative for a signal).
        started_at: When the process started (RFC 3339).
        finished_at: When it ended (RFC 3339).
        message: Extra explanation for the container's terminated state.

    Returns:
        The patch body: Succeeded for exit code 0, Failed otherwise.
    """
    name, image = _container(pod)
    exit_code, signum = exit_details(returncode)
    succeeded = exit_code == 0
    terminated: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": "Completed" if succeeded else "Error",
        "startedAt": started_at,
        "finishedAt": finished_at,
        "containerID": f"local://{pid}",
    }
    if signum is not None:
        terminated["signal"] = signum
        if not message:
            try:
                message = f"killed by {signals.Signals(signum).name}"
            except ValueError:
                message = f"killed by signal {signum}"
    if message:
        terminated["message"] = message
    status = _base(pod, "Succeeded" if succeeded else "Failed", started_at)
    status["conditions"] = _conditions(pod, finished_at, ready=False, reason="PodCompleted")
    status["containerStatuses"] = [
        {
            "name": name,
            "image": image,
            "imageID": "",
            "containerID": f"local://{pid}",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {"terminated": terminated},
            "lastState": {},
        }
    ]
    return {"status": status}


def setup_failed_status(
    pod: Mapping[str, Any], *, reason: str, message: str, now: str
) -> dict[str, Any]:
    """Build the status of a pod that could not start at all.

    A kubelet would keep such a pod Pending and retry; the runner fails it
    at once, so a test sees the mistake instead of a timeout.

    Args:
        pod: The pod object.
        reason: CamelCase reason (e.g. ``CreateContainerConfigError``).
        message: What went wrong.
        now: The current time (RFC 3339).

    Returns:
        The patch body: phase Failed with ``reason`` and ``message``, the
        container terminated with exit code 128.
    """
    name, image = _container(pod)
    status = _base(pod, "Failed", now)
    status["reason"] = reason
    status["message"] = message
    status["conditions"] = _conditions(pod, now, ready=False, reason="PodFailed")
    status["containerStatuses"] = [
        {
            "name": name,
            "image": image,
            "imageID": "",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {
                "terminated": {
                    "exitCode": SIGNAL_EXIT_BASE,
                    "reason": reason,
                    "message": message,
                    "startedAt": now,
                    "finishedAt": now,
                }
            },
            "lastState": {},
        }
    ]
    return {"status": status}
