"""Pure helpers of the benchmark: percentiles, Prometheus samples, /proc, tables.

Why this module exists: every figure the benchmark prints is computed here,
from plain numbers and text, so the arithmetic is unit-tested without a
cluster (``tests/unit/test_bench_stats.py``). Nothing here talks to the
network or starts processes.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

# --------------------------------------------------------------------------
# Latencies


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile of ``values``, linearly interpolated between ranks.

    The same definition as NumPy's default (``linear``): rank ``q * (n - 1)``.

    Args:
        values: the samples (any order).
        q: the quantile, 0..1 (0.5 is the median, 0.99 the p99).

    Returns:
        The quantile, or ``nan`` for no samples.

    Raises:
        ValueError: ``q`` is outside 0..1.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is outside 0..1")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Summary:
    """Latency figures of one series, in seconds.

    Attributes:
        n: number of samples.
        p50: median.
        p99: 99th percentile.
        max: the largest sample.
        mean: the arithmetic mean.
    """

    n: int
    p50: float
    p99: float
    max: float
    mean: float


def summarize(values: Sequence[float]) -> Summary:
    """Summarize a latency series.

    Args:
        values: samples in seconds.

    Returns:
        Count, p50, p99, max and mean (``nan`` when empty).
    """
    if not values:
        return Summary(0, math.nan, math.nan, math.nan, math.nan)
    return Summary(
        n=len(values),
        p50=percentile(values, 0.5),
        p99=percentile(values, 0.99),
        max=max(values),
        mean=sum(values) / len(values),
    )


def ratio(value: float, base: float) -> float:
    """``value / base``, or ``nan`` when either is missing or ``base`` is 0.

    Args:
        value: the measured figure.
        base: the baseline figure.

    Returns:
        The ratio.
    """
    if base == 0 or math.isnan(base) or math.isnan(value):
        return math.nan
    return value / base


# --------------------------------------------------------------------------
# Prometheus text


@dataclass(frozen=True)
class Sample:
    """One Prometheus sample.

    Attributes:
        name: the sample name (``_total``, ``_bucket`` etc. included).
        labels: its labels.
        value: its value.
    """

    name: str
    labels: Mapping[str, str]
    value: float


def parse_samples(text: str) -> list[Sample]:
    """Parse Prometheus text exposition into samples.

    Args:
        text: the body of a ``/metrics`` response.

    Returns:
        Every sample, in order.
    """
    return [
        Sample(s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def sum_samples(samples: Iterable[Sample], name: str, **match: str | Iterable[str]) -> float:
    """Sum the samples called ``name`` whose labels match.

    Args:
        samples: parsed samples.
        name: the sample name, e.g. ``apiserver_request_total``.
        **match: label -> required value (a string) or allowed values (an
            iterable of strings).

    Returns:
        The sum (0 when nothing matches).
    """
    allowed = {k: {v} if isinstance(v, str) else set(v) for k, v in match.items()}
    return sum(
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) in vs for k, vs in allowed.items())
    )


def counter_delta(
    before: Iterable[Sample], after: Iterable[Sample], name: str, **match: str | Iterable[str]
) -> float:
    """How much the matching counters went up between two scrapes.

    Args:
        before: the first scrape.
        after: the second scrape.
        name: the sample name.
        **match: as for :func:`sum_samples`.

    Returns:
        ``sum(after) - sum(before)``.
    """
    return sum_samples(after, name, **match) - sum_samples(before, name, **match)


def flat_to_samples(flat: Mapping[str, float]) -> list[Sample]:
    r"""Turn ``{"name{a=\"b\"}": value}`` (``OperatorProcess.metrics()``) into samples.

    Args:
        flat: sample keys as written in the exposition text, and values.

    Returns:
        The samples (label values unescaped for ``\"`` and ``\\``).
    """
    out = []
    for key, value in flat.items():
        name, brace, rest = key.partition("{")
        labels: dict[str, str] = {}
        if brace:
            for m in re.finditer(r'(\w+)="((?:[^"\\]|\\.)*)"', rest.rstrip("}")):
                labels[m.group(1)] = m.group(2).replace('\\"', '"').replace("\\\\", "\\")
        out.append(Sample(name, labels, value))
    return out


def histogram_buckets(samples: Iterable[Sample], name: str) -> list[tuple[float, float]]:
    """The cumulative buckets of histogram ``name`` as ``(upper bound, count)``.

    Args:
        samples: parsed samples.
        name: the histogram's base name (without ``_bucket``).

    Returns:
        Buckets sorted by upper bound, ``+Inf`` last.
    """
    buckets: dict[float, float] = {}
    for s in samples:
        if s.name == f"{name}_bucket" and "le" in s.labels:
            le = float(s.labels["le"])
            buckets[le] = buckets.get(le, 0.0) + s.value
    return sorted(buckets.items())


def bucket_delta(
    before: Sequence[tuple[float, float]], after: Sequence[tuple[float, float]]
) -> list[tuple[float, float]]:
    """Subtract two scrapes of the same cumulative histogram.

    Args:
        before: buckets from the first scrape (may be empty).
        after: buckets from the second scrape.

    Returns:
        The buckets of the observations made between the two scrapes.
    """
    old = dict(before)
    return [(le, count - old.get(le, 0.0)) for le, count in after]


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """The ``q``-quantile of a cumulative histogram, like PromQL's ``histogram_quantile``.

    Linear interpolation inside the bucket the rank falls in (the first
    bucket starts at 0). A rank in the ``+Inf`` bucket returns the highest
    finite bound (the true value is only known to be above it).

    Args:
        q: the quantile, 0..1.
        buckets: ``(upper bound, cumulative count)``, sorted, ``+Inf`` last.

    Returns:
        The estimate, or ``nan`` with no observations.
    """
    if not buckets or buckets[-1][1] <= 0:
        return math.nan
    total = buckets[-1][1]
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank and count > prev_count:
            if math.isinf(le):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return prev_le


def fraction_above(threshold: float, buckets: Sequence[tuple[float, float]]) -> float:
    """Share of observations above ``threshold`` (a bucket bound), from cumulative buckets.

    Args:
        threshold: one of the bucket upper bounds.
        buckets: ``(upper bound, cumulative count)``, sorted.

    Returns:
        The fraction in 0..1, or ``nan`` with no observations or no such bound.
    """
    if not buckets or buckets[-1][1] <= 0:
        return math.nan
    for le, count in buckets:
        if le == threshold:
            return 1.0 - count / buckets[-1][1]
    return math.nan


# --------------------------------------------------------------------------
# /proc


def cpu_ticks(stat: str) -> int:
    """CPU ticks (utime + stime), from the text of ``/proc/<pid>/stat``.

    Args:
        stat: the file's content. The command name (field 2) may hold spaces
            and parentheses; fields are counted after its last ``)``.

    Returns:
        User plus system CPU ticks of the process (all its threads).
    """
    fields = stat[stat.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); utime is field 14, stime field 15.
    return int(fields[11]) + int(fields[12])


def system_cpu_ticks(stat: str) -> tuple[int, int]:
    """Busy and total CPU ticks of the whole machine, from ``/proc/stat``.

    Args:
        stat: the file's content (its first ``cpu`` line sums all CPUs).

    Returns:
        ``(busy, total)``: total minus idle and iowait, and the total of
        user, nice, system, idle, iowait, irq, softirq and steal.
    """
    for line in stat.splitlines():
        if line.startswith("cpu "):
            values = [int(x) for x in line.split()[1:9]]
            total = sum(values)
            return total - values[3] - values[4], total
    return 0, 0


def schedstat(text: str) -> tuple[int, int]:
    """Time on a CPU and time waiting for one, in ns, from ``/proc/<pid>/task/<tid>/schedstat``.

    Args:
        text: the file's content: ``run_ns wait_ns timeslices``.

    Returns:
        ``(run_ns, wait_ns)``; ``(0, 0)`` for an empty or odd file.
    """
    parts = text.split()
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return 0, 0
    return int(parts[0]), int(parts[1])


def rss_bytes(status: str) -> int:
    """Resident set size, in bytes, from the text of ``/proc/<pid>/status``.

    Args:
        status: the file's content.

    Returns:
        ``VmRSS`` in bytes (0 when absent, e.g. a zombie).
    """
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            parts = line.split()
            return int(parts[1]) * 1024
    return 0


# --------------------------------------------------------------------------
# Load generator schedule


def renewal_offsets(count: int, period: float, phase: float = 0.0) -> list[float]:
    """Evenly spread start offsets for ``count`` renewals in one ``period``.

    Args:
        count: how many renewals per period.
        period: the renewal period, seconds.
        phase: shift of the whole schedule, as a fraction of one slot (0..1);
            lets several threads interleave their slots.

    Returns:
        ``count`` offsets in ``[0, period)``, ascending.
    """
    if count <= 0:
        return []
    slot = period / count
    return [(i + phase) * slot for i in range(count)]


# --------------------------------------------------------------------------
# Profiles


_LINE_NUMBER = re.compile(r":\d+\)$")


def top_frames(
    collapsed: str, limit: int = 10, by_function: bool = True
) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """Top frames of a py-spy ``--format raw`` (collapsed stacks) profile.

    Args:
        collapsed: lines ``frame;frame;...;leaf count`` (root first), frames
            like ``func (path/file.py:12)``.
        limit: how many frames to return per list.
        by_function: merge the lines of one function (drop ``:12``).

    Returns:
        ``(self, inclusive)``: frames with their share of all samples, by
        self time (the leaf) and by inclusive time (anywhere in the stack,
        counted once per stack), highest first.
    """
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        if by_function:
            frames = [_LINE_NUMBER.sub(")", f) for f in frames]
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            incl[frame] += count
    if total == 0:
        return [], []
    return (
        [(f, c / total) for f, c in own.most_common(limit)],
        [(f, c / total) for f, c in incl.most_common(limit)],
    )


_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>[^()]*?)(?::\d+)?\)$")


def frame_location(frame: str) -> tuple[str, tuple[str, ...]]:
    """The function and the module path of a py-spy frame.

    Args:
        frame: e.g. ``"ListWatch._watch_from (leasehold/controller/engines/watching.py:12)"``.

    Returns:
        ``(function, module parts)``, e.g. ``("ListWatch._watch_from",
        ("leasehold", "controller", "watching"))``: the file path without
        ``.py`` (a package's ``__init__`` left out), split at ``/``; however
        much of the path py-spy kept (it shortens paths on ``sys.path``), the
        module's dotted name is its tail. ``("", ())`` when the text is not a frame.
    """
    match = _FRAME.match(frame)
    if match is None:
        return "", ()
    path = match["path"].removesuffix(".py")
    parts = tuple(p for p in path.split("/") if p)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return match["function"], parts


@dataclass(frozen=True)
class FrameGroup:
    """Frames of one part of a program, by module (or package) and function, not by file.

    Attributes:
        module: dotted name, e.g. ``"leasehold.controller.engines.watching"``.
        function: qualified name in ``module`` (``"ListWatch._watch_from"``;
            a bare method name such as ``"select"`` matches it in any class),
            or ``None`` for every frame of ``module`` and its submodules.
    """

    module: str
    function: str | None = None

    def matches(self, frame: str) -> bool:
        """Whether the py-spy ``frame`` (see :func:`frame_location`) belongs to the group."""
        function, parts = frame_location(frame)
        want = tuple(self.module.split("."))
        if self.function is None:
            return any(parts[i : i + len(want)] == want for i in range(len(parts)))
        return parts[-len(want) :] == want and (
            function == self.function or function.endswith("." + self.function)
        )


def stack_share(collapsed: str, group: FrameGroup) -> float:
    """Share of profile samples whose stack has a frame of ``group``.

    Args:
        collapsed: py-spy ``--format raw`` text.
        group: the frames to look for.

    Returns:
        The share in 0..1 (``nan`` for an empty profile).
    """
    hit = total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        total += int(count_text)
        if any(group.matches(frame) for frame in stack.split(";")):
            hit += int(count_text)
    return hit / total if total else math.nan


# --------------------------------------------------------------------------
# Tables


@dataclass(frozen=True)
class BurstFloor:
    """The API server time an expiry burst needs, and the reclaim latency it allows.

    Attributes:
        requests_per_reclaim: the operator's requests per reclaimed lease.
        cpu_per_request: API server CPU seconds per request it served (a mean).
        apiserver_cores: cores the API server could have had: what it used
            in the window plus what the machine left idle.
        renewal_cores: the part of them the renewals took.
        burst_seconds: seconds the burst's requests take at all of
            ``apiserver_cores`` (the renewals set aside).
        p99_floor: the lowest p99 latency (s) that allows: no reclaim
            pattern on this API server's share does better.
        burst_seconds_with_renewals: the same at what the renewals, at their
            rate in the window, leave (``inf`` when they leave nothing).
        p99_with_renewals: the p99 latency (s) that allows; an estimate, not
            a bound: closed-loop renewals slow down while the burst is served.
    """

    requests_per_reclaim: float
    cpu_per_request: float
    apiserver_cores: float
    renewal_cores: float
    burst_seconds: float
    p99_floor: float
    burst_seconds_with_renewals: float
    p99_with_renewals: float


def reclaim_floor(
    *,
    reclaims: int,
    operator_requests: float,
    renewals: float,
    served: float,
    apiserver_cpu_seconds: float,
    window_seconds: float,
    expiry_spread: float,
    margin: float,
    idle_cores: float = 0.0,
) -> BurstFloor:
    """The floor of an expiry burst's reclaim latency set by the API server's CPU.

    All figures come from one window. The API server's CPU per request is its
    CPU time over the requests it served (watch fan-out included: every
    request pays its share; a mean, which a nearly idle API server's own
    background work inflates). The burst needs ``operator_requests`` of
    them: ``burst_seconds`` = operator requests x CPU per request / the
    cores the API server could have had (what it used, plus what the machine
    left idle). Reclaims cannot start before the first expiry
    plus ``margin``, and expiries spread evenly over ``expiry_spread`` s, so
    the i-th of n is reclaimed no sooner than ``margin + (i/n) x
    (burst_seconds - expiry_spread)`` after its expiry: ``p99_floor`` =
    ``margin + 0.99 x max(0, burst_seconds - expiry_spread)``. That is a
    lower bound (renewals set aside), as far as the mean CPU per request is
    the burst's. With the renewals at their rate in the window (x the same
    CPU per request) out of those cores, the same arithmetic gives
    ``p99_with_renewals``: an estimate, not a bound (closed-loop renewals
    slow down while the burst is served, and a nearly idle API server's mean
    per request is mostly its own background work).

    Args:
        reclaims: leases reclaimed in the window (> 0).
        operator_requests: the operator's requests for them in the window.
        renewals: renewal requests in the window.
        served: every request the API server served in the window.
        apiserver_cpu_seconds: the API server's CPU time in the window.
        window_seconds: the window's length.
        expiry_spread: seconds from the first expiry to the last.
        margin: the operator's expiry margin, s.
        idle_cores: cores the machine left idle in the window (the API
            server could have had them too).

    Returns:
        The :class:`BurstFloor`; NaN figures when nothing was served.
    """
    if reclaims <= 0 or served <= 0 or window_seconds <= 0:
        nan = math.nan
        return BurstFloor(nan, nan, nan, nan, nan, nan, nan, nan)
    per_request = apiserver_cpu_seconds / served
    cores = apiserver_cpu_seconds / window_seconds + max(0.0, idle_cores)
    renewal_cores = renewals * per_request / window_seconds
    need = operator_requests * per_request
    alone = need / cores if cores > 0 else math.inf
    left = cores - renewal_cores
    shared = need / left if left > 0 else math.inf
    return BurstFloor(
        requests_per_reclaim=operator_requests / reclaims,
        cpu_per_request=per_request,
        apiserver_cores=cores,
        renewal_cores=renewal_cores,
        burst_seconds=alone,
        p99_floor=margin + 0.99 * max(0.0, alone - expiry_spread),
        burst_seconds_with_renewals=shared,
        p99_with_renewals=margin + 0.99 * max(0.0, shared - expiry_spread),
    )


def fmt(value: float, unit: str = "", digits: int = 1) -> str:
    """Format a figure for a table (``-`` for missing values).

    Args:
        value: the figure.
        unit: appended after the number (``"ms"``, ``"x"``...).
        digits: digits after the decimal point.

    Returns:
        e.g. ``"3.2 ms"``.
    """
    if math.isnan(value):
        return "-"
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}" if unit and unit != "x" else f"{text}{unit}"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    r"""A GitHub-flavoured Markdown table, columns padded to line up in a terminal.

    Args:
        headers: column titles.
        rows: cells, as strings, one sequence per row.

    Returns:
        The table, lines joined with ``\n`` (no trailing newline).

    Raises:
        ValueError: a row has a different number of cells than ``headers``.
    """
    body = [list(r) for r in rows]
    for r in body:
        if len(r) != len(headers):
            raise ValueError(f"row {r} has {len(r)} cells, expected {len(headers)}")
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *body, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    sep = "| " + " | ".join("-" * w for w in widths) + " |"
    return "\n".join([line(headers), sep, *(line(r) for r in body)])
