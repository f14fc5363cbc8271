"""Benchmarks of leasehold against a real local control plane: ``python -m bench``.

One run starts one fresh local control plane and measures, each figure next
to a baseline taken in the same run, one module per part:

* :mod:`bench.operations`: lease operations (renew, claim, complete) against
  a raw compare-and-swap loop on the same CRD, at 1, 8 and 32 clients;
* :mod:`bench.contention`: many claimers racing for one lease;
* :mod:`bench.reclaim`: the operator reclaiming leases never renewed;
* :mod:`bench.scale`: the operator under 1k/5k/10k renewed leases, its
  profile (:mod:`bench.profile`) and its floors (:mod:`bench.floors`).

:mod:`bench.harness` and :mod:`bench.cluster` hold what the parts share,
:mod:`bench.stats` the arithmetic (unit-tested), :mod:`bench.report` the
tables written to ``bench/results.md``.
"""

import sys
from pathlib import Path

_TESTING = str(Path(__file__).resolve().parents[1] / "testing")
if _TESTING not in sys.path:
    sys.path.append(_TESTING)  # the test harness: localcluster, operatorproc
