"""Measured exponents of 1 - corr(tau) against the attention SVM's direction.

For each trajectory (a `trajectory.json` of `tokensel run` / `tokensel twin` with a
`[direction]` section, or the --out directory holding it), the least-squares slope of
log(1 - corr) against log(step) over the checkpoints of the last decade of steps
(step >= last step / 10), then the median, least and greatest slope over the files.
A measurement, not a rate: the slope of a finite window (proofs-notes/max-margin.md,
"Measured").

    python3 examples/direction_slopes.py DIR_OR_TRAJECTORY ...

Python standard library only.
"""

import json
import math
import os
import statistics
import sys


def load(path):
    if os.path.isdir(path):
        path = os.path.join(path, "trajectory.json")
    with open(path) as f:
        return json.load(f)


def slope(traj):
    """(slope, number of points, first step, last step) over the last decade."""
    points = [
        (c["step"], c["direction"]["one_minus_corr"])
        for c in traj["checkpoints"]
        if c.get("direction") and c["direction"].get("one_minus_corr") is not None
    ]
    if not points:
        raise ValueError("no direction records (no [direction] section?)")
    last = points[-1][0]
    window = [(s, v) for s, v in points if s * 10 >= last and s > 0]
    if len(window) < 2:
        raise ValueError("fewer than two checkpoints in the last decade")
    if any(not isinstance(v, (int, float)) or v <= 0 for _, v in window):
        raise ValueError("1 - corr not a positive number in the window: %r" % window)
    xs = [math.log(s) for s, _ in window]
    ys = [math.log(v) for _, v in window]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    return sxy / sxx, len(window), window[0][0], last


def main(paths):
    if not paths:
        sys.exit(__doc__)
    slopes = []
    for p in paths:
        t = load(p)
        k, n, first, last = slope(t)
        end = t["checkpoints"][-1]["direction"]["one_minus_corr"]
        print(
            "%s: seed %s, slope %.4f over %d checkpoints (steps %d..%d), 1 - corr at end %.3e"
            % (p, t["config"]["seed"], k, n, first, last, end)
        )
        slopes.append(k)
    print(
        "%d trajectories: median slope %.4f, min %.4f, max %.4f"
        % (len(slopes), statistics.median(slopes), min(slopes), max(slopes))
    )


if __name__ == "__main__":
    main(sys.argv[1:])
