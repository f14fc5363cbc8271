"""``pip install leasehold`` (no extras) gives the worker SDK and ``leasehold run``, not Kopf.

A fresh venv gets the project from a copy of this checkout (setuptools
builds in the source tree; a stale ``build/`` there could ship deleted
modules) with its core dependencies only. The dependency wheels are kept in
``$LEASEHOLD_CACHE_DIR/wheels`` and installed from there without an index;
the index is asked only to fill that folder, the first time or when the
core dependencies change.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _wheelhouse() -> Path:
    cache = os.environ.get("LEASEHOLD_CACHE_DIR") or str(Path.home() / ".cache" / "leasehold")
    return Path(cache) / "wheels"


def _clean_env() -> dict[str, str]:
    """The environment without anything that would let the venv see other packages."""
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def _run(args: Sequence[str | Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, env=_clean_env(), capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with ``pip install <repo>``, no extras; returns its ``bin`` folder."""
    where = tmp_path_factory.mktemp("core-venv")
    source = where / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(
        REPO / "operator", source / "operator", ignore=shutil.ignore_patterns("__pycache__")
    )
    venv = where / "venv"
    made = _run([sys.executable, "-m", "venv", venv], where)
    assert made.returncode == 0, made.stderr
    pip: list[str | Path] = [
        venv / "bin" / "python",
        "-m",
        "pip",
        "--disable-pip-version-check",
        "install",
        "-q",
    ]
    wheels = _wheelhouse()
    wheels.mkdir(parents=True, exist_ok=True)
    offline = [*pip, "--no-index", "--find-links", wheels, source]
    installed = _run(offline, where)
    if installed.returncode != 0:  # first run, or the core dependencies changed
        project = tomllib.loads((source / "pyproject.toml").read_text())
        needs: list[str] = [
            *project["project"]["dependencies"],
            *project["build-system"]["requires"],
        ]
        fill: list[str | Path] = [venv / "bin" / "python", "-m", "pip", "wheel", "-q", "-w", wheels]
        filled = _run([*fill, *needs], where)
        assert filled.returncode == 0, f"filling {wheels} failed:\n{filled.stderr}"
        installed = _run(offline, where)
    assert installed.returncode == 0, installed.stderr
    return venv / "bin"


def test_the_sdk_and_run_work_without_the_operator_extra(core_venv: Path, tmp_path: Path) -> None:
    imported = _run(
        [core_venv / "python", "-c", "import leasehold.worker, leasehold.fencing; print('ok')"],
        tmp_path,
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == "ok"

    helped = _run([core_venv / "leasehold", "run", "--help"], tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert "usage: leasehold run" in helped.stdout

    plugin = _run([core_venv / "kubectl-leasehold", "--help"], tmp_path)  # the kubectl plugin
    assert plugin.returncode == 0, plugin.stderr
    assert "usage: kubectl leasehold" in plugin.stdout

    for framework in ("kopf", "prometheus_client", "pydantic_settings"):
        absent = _run([core_venv / "python", "-c", f"import {framework}"], tmp_path)
        assert absent.returncode == 1
        assert "ModuleNotFoundError" in absent.stderr


def test_the_operator_without_its_extra_says_what_to_install(
    core_venv: Path, tmp_path: Path
) -> None:
    ran = _run([core_venv / "leasehold", "operator"], tmp_path)
    assert ran.returncode == 2
    assert "pip install 'leasehold[operator]'" in ran.stderr
    assert "Traceback" not in ran.stderr
