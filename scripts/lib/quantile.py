#!/usr/bin/env python3
"""Quantiles of a Prometheus histogram from a /metrics page on stdin, in milliseconds.

    curl -s localhost:8080/metrics | scripts/lib/quantile.py order_end_to_end_seconds 0.5 0.99

Prints one figure per quantile, on one line. Interpolates linearly inside the bucket the
quantile falls in, as Prometheus's histogram_quantile does; sums the buckets over every label
set of the metric.
"""

import re
import sys


def quantile(buckets, q):
    """buckets: sorted (upper bound, cumulative count)."""
    total = buckets[-1][1]
    if total == 0:
        return float("nan")
    rank = q * total
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower
            inside = count - below
            share = (rank - below) / inside if inside else 0.0
            return lower + (upper - lower) * share
        lower, below = upper, count
    return lower


def main():
    name, qs = sys.argv[1], [float(q) for q in sys.argv[2:]]
    pattern = re.compile(rf'^{re.escape(name)}_bucket\{{(.*)\}}\s+(\S+)')
    counts = {}
    for line in sys.stdin:
        match = pattern.match(line)
        if not match:
            continue
        le = re.search(r'le="([^"]+)"', match.group(1)).group(1)
        bound = float("inf") if le == "+Inf" else float(le)
        counts[bound] = counts.get(bound, 0.0) + float(match.group(2))
    if not counts:
        sys.exit(f"no histogram named {name}")
    buckets = sorted(counts.items())
    print(" ".join(f"{1000 * quantile(buckets, q):.1f}" for q in qs))


if __name__ == "__main__":
    main()
