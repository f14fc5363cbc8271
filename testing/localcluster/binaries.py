"""Find the control plane binaries and the client tools, building them if needed.

Both come from the project's scripts, which cache their results:
``hack/controlplane/build.sh`` (etcd and the Kubernetes components, built
from Go modules) and ``hack/tools.sh`` (static kubectl and helm). Each script
prints its bin directory on stdout; progress goes to stderr, which is passed
through so a first, long build shows what it is doing.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from localcluster.errors import BuildError
from localcluster.layout import COMPONENTS

HACK_DIR = Path(__file__).resolve().parents[2] / "hack"
BUILD_SCRIPT = HACK_DIR / "controlplane" / "build.sh"
TOOLS_SCRIPT = HACK_DIR / "tools.sh"


def _run_script(script: Path, expected: tuple[str, ...]) -> Path:
    try:
        result = subprocess.run(
            [str(script)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, check=False, text=True
        )
    except OSError as exc:
        raise BuildError(f"cannot run {script}: {exc}") from exc
    if result.returncode != 0:
        raise BuildError(
            f"{script} failed with exit code {result.returncode} (its stderr is above)"
        )
    lines = result.stdout.strip().splitlines()
    if not lines:
        raise BuildError(f"{script} printed no bin directory")
    bin_dir = Path(lines[-1])
    check_binaries(bin_dir, expected)
    return bin_dir


def check_binaries(bin_dir: Path, names: tuple[str, ...] = COMPONENTS) -> None:
    """Check that a folder holds the named executables.

    Args:
        bin_dir: The folder.
        names: Executable names.

    Raises:
        BuildError: If one is missing or not executable.
    """
    missing = [name for name in names if not _is_executable(bin_dir / name)]
    if missing:
        raise BuildError(f"{bin_dir} lacks executable {', '.join(missing)}")


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def control_plane_bin_dir() -> Path:
    """Return the folder of etcd and the Kubernetes binaries, building them first if needed.

    The first build takes 10 to 20 minutes; later calls return at once.

    Returns:
        The bin directory.

    Raises:
        BuildError: If the build fails or its output lacks a binary.
    """
    return _run_script(BUILD_SCRIPT, COMPONENTS)


def tools_bin_dir() -> Path:
    """Return the folder of the static ``kubectl`` and ``helm``, installing them first if needed.

    Returns:
        The bin directory.

    Raises:
        BuildError: If the installation fails.
    """
    return _run_script(TOOLS_SCRIPT, ("kubectl", "helm"))
