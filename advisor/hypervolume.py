"""Exact hypervolume of three minimisation objectives scaled to [0, 1], against the
reference point (REF, REF, REF): the default strategy ranks combinations by it
(advisor/combine.py) and benchmarks/search_efficiency.py scores strategies with it."""

from __future__ import annotations

from collections.abc import Iterable

REF = 1.1


def hypervolume(points: Iterable[tuple[float, float, float]]) -> float:
    """The volume dominated by ``points`` inside [0, REF]^3 (slices along the first axis).

    Example:
        >>> round(hypervolume([(0.0, 0.0, 0.0)]), 3)
        1.331
    """
    pts = sorted({p for p in points if all(v < REF for v in p)})
    total = 0.0
    for i, (x, _, _) in enumerate(pts):
        nxt = pts[i + 1][0] if i + 1 < len(pts) else REF
        if nxt > x:
            total += (nxt - x) * _hv2d([(p[1], p[2]) for p in pts[: i + 1]])
    return total


def _hv2d(points: list[tuple[float, float]]) -> float:
    area, best_y = 0.0, REF
    for x, y in sorted(points):
        if y < best_y:
            area += (REF - x) * (best_y - y)
            best_y = y
    return area
