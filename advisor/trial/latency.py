"""An inference trial's per-request latency (``advisor.core.latency``), measured after its
throughput timing so that the throughput is measured as before: single forward calls
timed one by one, each ending in a synchronisation (on CUDA; on the CPU a call has ended
when it returns).

1. At the trial's batch size, on the batches the throughput timing already warmed up:
   until ``MAX_CALLS`` calls, or ``PHASE_S`` seconds once ``MIN_CALLS`` are in (at most
   ``HARD_S`` seconds in all for a slow model, with at least ``FLOOR_CALLS``).
2. At batch 1, on single validation items: ``WARMUP_CALLS`` untimed calls first (a new
   shape: a compiled model may compile again), then the same bounds with
   ``MAX_BATCH1_CALLS`` and ``MIN_BATCH1_CALLS``. Only in a single-process trial: with several ranks (data, tensor or
   pipeline parallelism) one item is not what they split.

Ranks stay in lockstep: every rank makes as many calls at the batch size as the one that
wants the most (``agree_more``, outside the timed calls).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from advisor.core.latency import Latency
from advisor.trial.shared import agree_more, cycle

MAX_CALLS, MAX_BATCH1_CALLS = 200, 50
MIN_CALLS, MIN_BATCH1_CALLS = 50, 20  # unless HARD_S runs out first
PHASE_S, HARD_S = 1.0, 5.0
FLOOR_CALLS = 5  # even a slow model gets this many (its p99 is then its slowest call)
WARMUP_CALLS = 3


def _wants_more(calls: int, elapsed: float, max_calls: int, min_calls: int) -> bool:
    if calls >= max_calls:
        return False
    if calls < FLOOR_CALLS:
        return True
    return elapsed < (PHASE_S if calls >= min_calls else HARD_S)


def _timed_calls(prepared: Any, inputs: Iterator[Any], max_calls: int, min_calls: int,
                 agree: Callable[[Any, bool], bool] | None) -> list[float]:
    """Seconds per call: each from before fetching to after the synchronisation the input
    already in hand (fetching is not the request's work)."""
    out: list[float] = []
    start = time.perf_counter()
    more = True
    while more:
        x = next(inputs)
        t = time.perf_counter()
        prepared.predict(x)
        prepared.synchronize()
        out.append(time.perf_counter() - t)
        want = _wants_more(len(out), time.perf_counter() - start, max_calls, min_calls)
        more = agree(prepared, want) if agree is not None else want
    return out


def measure_latency(prepared: Any, batches: Iterator[Any], val: Any, collate: Any) -> Latency:
    """Both phases (call under torch.inference_mode). ``batches``: (inputs, targets) at the
    trial's batch size, endlessly; ``val``: the validation set, read one item at a time
    with the workload's ``collate`` (None: torch's default)."""
    from torch.utils.data import DataLoader
    at_batch = _timed_calls(prepared, (x for x, _ in batches), MAX_CALLS, MIN_CALLS, agree_more)
    bs = prepared.config.batch_size
    if prepared.ranks.world > 1:
        return Latency.measured(bs, at_batch, batch1_note="not measured with several ranks")
    try:
        ones = (x for x, _ in cycle(DataLoader(val, batch_size=1, collate_fn=collate)))
        for _ in range(WARMUP_CALLS):
            prepared.predict(next(ones))
        prepared.synchronize()
        batch1 = _timed_calls(prepared, ones, MAX_BATCH1_CALLS, MIN_BATCH1_CALLS, None)
    except Exception as exc:  # noqa: BLE001 - a configuration that cannot serve one item still has its figures
        note = f"batch 1 failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
        return Latency.measured(bs, at_batch, batch1_note=note)
    return Latency.measured(bs, at_batch, batch1)
