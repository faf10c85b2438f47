"""Per-request latency of an inference trial, as serving users ask for it: the median and
the tail (p50 / p95 / p99) of single forward calls at the trial's batch size, and the
latency of one item alone (batch 1), the figure a request-at-a-time server sees first.

A trial (``advisor.trial.loop``) times the calls after its throughput timing and stores
``Latency.to_dict()`` as ``telemetry["latency"]``; ``Latency.of(attrs)`` reads it back from a
stored trial's attributes (None for a training trial, and for a study from before the
figure existed). Plain data: no heavy library.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

KEY = "latency"  # the key under the trial's telemetry
CONSTRAINT = "max_latency"  # the stored constraint (p99 minus --max-latency-ms, in ms: <= 0 when satisfied)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``, linearly interpolated between the
    closest ranks (numpy's default); ValueError for no values."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Latency:
    """Latencies in milliseconds: p50 / p95 / p99 over ``calls`` calls at ``batch_size``;
    the median over ``batch1_calls`` calls at batch 1 (None when not measured: several
    ranks, or a configuration that cannot run one item; ``batch1_note`` says why)."""

    batch_size: int
    calls: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    batch1_ms: float | None = None
    batch1_p99_ms: float | None = None
    batch1_calls: int = 0
    batch1_note: str | None = None
    # interference (``advisor.trial.latency``): the calls dropped because other work disturbed their
    # window, the windows at the batch size and how many were disturbed, whether too few stayed clean
    # (the calls are then all kept, and the trial runs again), and whether the windows lost over
    # ``interference.CEILING`` of their time at the median (``busy``: the figures read slow)
    dropped_calls: int = 0
    windows: int = 0
    disturbed_windows: int = 0
    too_few_clean: bool = False
    busy: bool = False

    @classmethod
    def measured(cls, batch_size: int, seconds: Sequence[float], batch1: Sequence[float] = (),
                 batch1_note: str | None = None, **interference: Any) -> Latency:
        """From call times in seconds (``batch1``: the batch-1 calls', possibly none), with
        the interference fields as keywords."""
        ms = [1e3 * s for s in seconds]
        one = [1e3 * s for s in batch1]
        return cls(batch_size, len(ms), percentile(ms, 50), percentile(ms, 95), percentile(ms, 99),
                   percentile(one, 50) if one else None, percentile(one, 99) if one else None, len(one),
                   None if one else batch1_note, **interference)

    @property
    def mark(self) -> str:
        """' (busy)' after a figure timed on a busy machine, else ''."""
        return " (busy)" if self.busy else ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Latency | None:
        """As stored; None for anything else (an older trial has no latency)."""
        if not isinstance(data, Mapping):
            return None
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in known})
        except TypeError:
            return None

    @classmethod
    def of(cls, attrs: Mapping[str, Any]) -> Latency | None:
        """A stored trial's latency, from its attributes (its ``telemetry``)."""
        telemetry = attrs.get("telemetry")
        return cls.from_dict(telemetry.get(KEY)) if isinstance(telemetry, Mapping) else None

    def text(self) -> str:
        """'p50 3.10 ms p99 4.02 ms at batch 64, batch 1 1.20 ms' (one line)."""
        out = f"p50 {fmt_ms(self.p50_ms)} p99 {fmt_ms(self.p99_ms)}"
        out += f" at batch {self.batch_size}"
        if self.batch1_ms is not None:
            out += f", batch 1 {fmt_ms(self.batch1_ms)}"
        return out


def fmt_ms(ms: float | None) -> str:
    """A latency as read: '0.153 ms', '3.10 ms', '42.1 ms', '1,234 ms'; '-' for None."""
    if ms is None:
        return "-"
    if ms < 1:
        return f"{ms:.3f} ms"
    if ms < 10:
        return f"{ms:.2f} ms"
    if ms < 100:
        return f"{ms:.1f} ms"
    return f"{ms:,.0f} ms"


def over_limit_text(p99_ms: float, limit_ms: float, busy: bool = False) -> str:
    """The infeasible reason: 'p99 latency 12.3 ms over --max-latency-ms 10' (and, for a
    latency timed on a busy machine, that it may read slow)."""
    return (f"p99 latency {fmt_ms(p99_ms)} over --max-latency-ms {limit_ms:g}"
            + (" (timed on a busy machine: it may read slow)" if busy else ""))
