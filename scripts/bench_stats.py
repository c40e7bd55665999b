"""Statistics the benchmarks share: latency percentiles, medians and ranges of rounds, paired ratios."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``samples``."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    rank = math.ceil(round(q / 100 * len(ordered), 9))  # round: 99.9/100*1000 is 999.0000000000001
    return ordered[max(0, rank - 1)]


def percentiles(samples: Sequence[float]) -> tuple[float, float]:
    """(p50, p99) in ms of samples in seconds."""
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(len(ordered) * 0.99) - 1] * 1000


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of the rounds' values."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Round by round ``numerators[i] / denominators[i]``: each figure against the one measured
    next to it, which cancels much of a shared machine's swings between rounds."""
    if len(numerators) != len(denominators):
        raise ValueError(f"{len(numerators)} rounds against {len(denominators)}")
    return [n / d for n, d in zip(numerators, denominators, strict=True)]
