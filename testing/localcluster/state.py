"""The state file: which processes make up a running cluster.

``python -m localcluster up`` exits while the cluster keeps running, so the
pids must live on disk for ``down`` and ``status`` to find them. The file is
``<workdir>/state.json``; a started cluster writes it after each component
starts (so even a start cut short can be cleaned up) and a clean stop removes
it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localcluster.errors import StateError
from localcluster.layout import APISERVER, CONTROLLER_MANAGER, ETCD, SCHEDULER, Layout, Ports
from localcluster.process import Process

_VERSION = 1


@dataclass(frozen=True)
class ClusterState:
    """What ``state.json`` records about a cluster.

    Attributes:
        workdir: Work directory of the cluster.
        kubeconfig: Admin kubeconfig.
        server: API server URL.
        ports: Loopback ports of the components.
        processes: Started components, in start order.
    """

    workdir: Path
    kubeconfig: Path
    server: str
    ports: Ports
    processes: tuple[Process, ...]

    def running(self) -> list[Process]:
        """Return the recorded processes that still run.

        Returns:
            Those processes, in start order.
        """
        return [process for process in self.processes if process.running()]

    def stop_waves(self) -> list[list[Process]]:
        """Return the processes grouped in stop order: clients first, etcd last.

        Returns:
            Groups of processes for `localcluster.process.stop_all`.
        """
        by_name = {process.name: process for process in self.processes}
        order = [[SCHEDULER, CONTROLLER_MANAGER], [APISERVER], [ETCD]]
        waves = [[by_name[name] for name in wave if name in by_name] for wave in order]
        # Extra API servers (`LocalCluster.add_apiserver`) stop with the first one.
        waves[1] += [p for p in self.processes if p.name.startswith(f"{APISERVER}-")]
        return waves

    def to_json(self) -> dict[str, Any]:
        """Return the state as a JSON-ready mapping.

        Returns:
            The mapping written to ``state.json``.
        """
        return {
            "version": _VERSION,
            "workdir": str(self.workdir),
            "kubeconfig": str(self.kubeconfig),
            "server": self.server,
            "ports": self.ports.to_dict(),
            "processes": [
                {"name": p.name, "pid": p.pid, "binary": str(p.binary), "log": str(p.log)}
                for p in self.processes
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterState:
        """Read a state from its JSON mapping.

        Args:
            data: The mapping read from ``state.json``.

        Returns:
            The state; its processes have no child handle.

        Raises:
            StateError: If the mapping is not a state of this version.
        """
        if data.get("version") != _VERSION:
            raise StateError(f"unknown state file version {data.get('version')!r}")
        try:
            return cls(
                workdir=Path(data["workdir"]),
                kubeconfig=Path(data["kubeconfig"]),
                server=str(data["server"]),
                ports=Ports(**data["ports"]),
                processes=tuple(
                    Process(
                        name=str(p["name"]),
                        pid=int(p["pid"]),
                        binary=Path(p["binary"]),
                        log=Path(p["log"]),
                    )
                    for p in data["processes"]
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"malformed state file: {exc!r}") from exc


def save_state(layout: Layout, state: ClusterState) -> None:
    """Write ``state.json`` atomically.

    Args:
        layout: The cluster's paths.
        state: The state to record.
    """
    tmp = layout.state_file.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, layout.state_file)


def load_state(layout: Layout) -> ClusterState | None:
    """Read ``state.json`` if there is one.

    Args:
        layout: The cluster's paths.

    Returns:
        The recorded state, or None when no state file exists.

    Raises:
        StateError: If the file cannot be parsed.
    """
    try:
        text = layout.state_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StateError(f"{layout.state_file} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise StateError(f"{layout.state_file} does not hold a JSON object")
    return ClusterState.from_json(data)


def clear_state(layout: Layout) -> None:
    """Remove ``state.json`` if present.

    Args:
        layout: The cluster's paths.
    """
    layout.state_file.unlink(missing_ok=True)
