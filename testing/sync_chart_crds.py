"""Copy the generated CRDs from ``deploy/crds/`` into the Helm chart's ``crds/``.

Why this exists: the pydantic models are the single source of truth; ``make
crds`` writes ``deploy/crds/``, and Helm only installs CRDs from a ``crds/``
folder inside the chart (it cannot read files outside the chart). This
script keeps the chart's copies byte-for-byte equal to ``deploy/crds/``;
``--check`` only reports drift (``tests/unit/test_chart_values.py`` fails on
it too). Files in the chart's ``crds/`` that are not leasehold's own CRDs
(``kopf-peering.yaml``, Kopf's peering CRDs) are left alone.

Usage::

    python testing/sync_chart_crds.py          # copy
    python testing/sync_chart_crds.py --check  # exit 1 on drift, write nothing
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "deploy" / "crds"
CHART_CRDS = REPO / "deploy" / "helm" / "leasehold" / "crds"
PATTERN = "*.leasehold.dev.yaml"
"""The generated CRDs, one file per CRD, named ``<plural>.leasehold.dev.yaml``."""


def drift(source: Path = SOURCE, target: Path = CHART_CRDS) -> list[str]:
    """List the leasehold CRD files that differ between the two folders.

    Args:
        source: The generated CRDs (``deploy/crds``).
        target: The chart's ``crds/`` folder.

    Returns:
        File names that are missing from ``target``, differ in content, or
        exist only in ``target`` (a CRD removed from the models); empty when
        the chart is up to date.
    """
    wanted = {path.name: path.read_bytes() for path in sorted(source.glob(PATTERN))}
    have = {path.name: path.read_bytes() for path in sorted(target.glob(PATTERN))}
    names = sorted(set(wanted) | set(have))
    return [name for name in names if wanted.get(name) != have.get(name)]


def sync(source: Path = SOURCE, target: Path = CHART_CRDS) -> list[str]:
    """Make the chart's leasehold CRDs equal to the generated ones.

    Args:
        source: The generated CRDs (``deploy/crds``).
        target: The chart's ``crds/`` folder.

    Returns:
        The file names written or removed.
    """
    target.mkdir(parents=True, exist_ok=True)
    changed = drift(source, target)
    for name in changed:
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)
        else:
            (target / name).unlink()
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: Arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0 when in sync (or synced), 1 when ``--check`` found drift.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report drift; write nothing")
    args = parser.parse_args(argv)
    if args.check:
        stale = drift()
        if stale:
            print(
                f"chart CRDs differ from deploy/crds: {', '.join(stale)}; "
                "run `python testing/sync_chart_crds.py`",
                file=sys.stderr,
            )
            return 1
        print("chart CRDs are up to date")
        return 0
    for name in sync():
        print(f"synced {CHART_CRDS.relative_to(REPO) / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
