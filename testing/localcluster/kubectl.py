"""A small runner for the project's kubectl, bound to one kubeconfig.

Tests and demos call the static kubectl from ``hack/tools.sh``, never the
machine's own (``/usr/bin/kubectl`` may be an old gcloud wrapper).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any


class KubectlError(subprocess.CalledProcessError):
    """kubectl exited non-zero; the message includes its stderr."""

    def __str__(self) -> str:
        stderr = self.stderr.strip() if isinstance(self.stderr, str) else ""
        return f"{super().__str__()}\n{stderr}" if stderr else super().__str__()


class Kubectl:
    """Run kubectl against one cluster.

    Attributes:
        binary: The kubectl executable.
        kubeconfig: The kubeconfig every call uses (``--kubeconfig``).
        timeout: Default seconds a call may take.
    """

    def __init__(self, binary: Path, kubeconfig: Path, *, timeout: float = 60.0) -> None:
        """Bind a kubectl binary to a kubeconfig.

        Args:
            binary: The kubectl executable.
            kubeconfig: The kubeconfig to use.
            timeout: Default seconds a call may take.
        """
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.timeout = timeout

    def __call__(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl --kubeconfig <kubeconfig> <args...>``.

        Args:
            *args: kubectl arguments, e.g. ``"get", "pods", "-n", "x"``.
            input: Text for stdin, e.g. a manifest for ``apply -f -``.
            check: Raise on a non-zero exit.
            timeout: Seconds the call may take; default `timeout`.

        Returns:
            The finished process, with text stdout and stderr.

        Raises:
            KubectlError: If ``check`` and kubectl exits non-zero.
            subprocess.TimeoutExpired: If kubectl runs too long.
        """
        argv = [str(self.binary), "--kubeconfig", str(self.kubeconfig), *args]
        result = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=self.timeout if timeout is None else timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, argv, result.stdout, result.stderr)
        return result

    def json(self, *args: str, input: str | None = None) -> Any:
        """Run kubectl with ``-o json`` and parse its output.

        Args:
            *args: kubectl arguments, without ``-o``.
            input: Text for stdin.

        Returns:
            The parsed JSON document.

        Raises:
            KubectlError: If kubectl exits non-zero.
        """
        return json.loads(self(*args, "-o", "json", input=input).stdout)
