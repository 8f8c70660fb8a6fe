"""Summaries of wait-time samples (per-step data waits)."""

import math

__all__ = ["summarize"]


def _percentile(ordered, fraction):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not ordered:
        return 0.0
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(waits, threshold=None):
    """count, total, mean, p50, p95, p99 and max of `waits` (seconds).

    With `threshold` (seconds, e.g. the compute time of a step), also
    'over': the share of waits longer than it.
    """
    ordered = sorted(w for w in waits if not math.isnan(w))
    n = len(ordered)
    total = math.fsum(ordered)
    out = {
        "count": n,
        "total": total,
        "mean": total / n if n else 0.0,
        "p50": _percentile(ordered, 0.50),
        "p95": _percentile(ordered, 0.95),
        "p99": _percentile(ordered, 0.99),
        "max": ordered[-1] if n else 0.0,
    }
    if threshold is not None:
        out["over"] = sum(1 for w in ordered if w > threshold) / n if n else 0.0
    return out
