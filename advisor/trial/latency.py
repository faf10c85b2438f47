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

Interference, as the step timer judges its blocks (``advisor.core.interference``): the
calls are grouped into windows of about ``WINDOW_S``, the process's interference counters
read (outside the timed calls) where each starts and ends; the calls of a window scored
over the study's limit (or its windows' own, when the study has none yet) and slower than
the clean windows are dropped, and the percentiles are over the rest. When too few windows
stay clean every call is kept, marked ``too_few_clean`` (the trial then runs again, as for
its throughput); ``busy`` when the windows lost over ``CEILING`` of their time at the
median. A review's busy machine put a p99 against ``--max-latency-ms`` with no mark.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from advisor.core.interference import CEILING, disturbed_blocks, limit_of, score, too_few_clean
from advisor.core.latency import Latency
from advisor.machine.interference import difference, read_counters
from advisor.trial.shared import agree_more, cycle

MAX_CALLS, MAX_BATCH1_CALLS = 200, 50
MIN_CALLS, MIN_BATCH1_CALLS = 50, 20  # unless HARD_S runs out first
PHASE_S, HARD_S = 1.0, 5.0
FLOOR_CALLS = 5  # even a slow model gets this many (its p99 is then its slowest call)
WARMUP_CALLS = 3
WINDOW_S = 0.05  # calls are judged for interference in windows of about this long ...
WINDOW_CALLS = 20  # ... and at most this many calls (so that even fast calls make ~10 windows)


class _Windows:
    """The timed calls grouped into windows of equal call count (sized from the first call
    to last about ``WINDOW_S``: equal time would give a disturbed stretch, whose calls are
    slow, more windows than the quiet rest), with the interference counters' differences
    over each (read between calls, outside their timing)."""

    def __init__(self, counters: Callable[[], dict[str, float] | None] = read_counters) -> None:
        self.counters = counters
        self.spans: list[tuple[int, int]] = []  # each window's calls: [first, end)
        self.counts: list[dict[str, float]] = []
        self._open: tuple[int, float, dict[str, float] | None] | None = None
        self._size = 0

    def before(self, call: int) -> None:
        if self._open is None:
            start = self.counters()  # read before the clock: the window's first call is what sizes it
            self._open = (call, time.perf_counter(), start)

    def after(self, call: int, last: bool) -> None:
        """Call ``call`` ended: close its window once it holds the window's calls, or at the last call."""
        if self._open is None:
            return
        first, began, start = self._open
        if not self._size:
            self._size = max(1, min(WINDOW_CALLS, math.ceil(WINDOW_S / max(time.perf_counter() - began, 1e-9))))
        if last or call + 1 - first >= self._size:
            self.spans.append((first, call + 1))
            self.counts.append(difference(start, self.counters()))
            self._open = None

    def judge(self, seconds: list[float], limit: float | None, self_contended: bool) -> tuple[list[float], dict]:
        """The calls of the clean windows (all of them when too few are clean), and the
        interference fields of ``Latency``."""
        scores = [score(c) for c in self.counts]
        step_s = [sum(seconds[a:b]) / (b - a) for a, b in self.spans]
        dropped = set(disturbed_blocks(step_s, scores, limit if limit is not None else limit_of(scores),
                                       self_contended))
        clean = [s for i, (a, b) in enumerate(self.spans) if i not in dropped for s in seconds[a:b]]
        few = bool(dropped) and too_few_clean(len(self.spans), len(self.spans) - len(dropped))
        known = [x for x in scores if x is not None]
        busy = not self_contended and bool(known) and statistics.median(known) > CEILING  # as interference.busy
        kept = seconds if few or not clean else clean
        return kept, {"dropped_calls": len(seconds) - len(kept), "windows": len(self.spans),
                      "disturbed_windows": len(dropped), "too_few_clean": few, "busy": busy}


def _wants_more(calls: int, elapsed: float, max_calls: int, min_calls: int) -> bool:
    if calls >= max_calls:
        return False
    if calls < FLOOR_CALLS:
        return True
    return elapsed < (PHASE_S if calls >= min_calls else HARD_S)


def _timed_calls(prepared: Any, inputs: Iterator[Any], max_calls: int, min_calls: int,
                 agree: Callable[[Any, bool], bool] | None, windows: _Windows) -> list[float]:
    """Seconds per call: each from before fetching to after the synchronisation the input
    already in hand (fetching is not the request's work); ``windows`` reads the counters
    between calls."""
    out: list[float] = []
    start = time.perf_counter()
    more = True
    while more:
        x = next(inputs)
        windows.before(len(out))
        t = time.perf_counter()
        prepared.predict(x)
        prepared.synchronize()
        out.append(time.perf_counter() - t)
        want = _wants_more(len(out), time.perf_counter() - start, max_calls, min_calls)
        more = agree(prepared, want) if agree is not None else want
        windows.after(len(out) - 1, last=not more)
    return out


def measure_latency(prepared: Any, batches: Iterator[Any], val: Any, collate: Any, limit: float | None = None,
                    self_contended: bool = False,
                    counters: Callable[[], dict[str, float] | None] = read_counters) -> Latency:
    """Both phases (call under torch.inference_mode). ``batches``: (inputs, targets) at the
    trial's batch size, endlessly; ``val``: the validation set, read one item at a time
    with the workload's ``collate`` (None: torch's default); ``limit``: the study's
    interference limit (None: the windows' own); ``self_contended``: the trial's own threads
    or ranks outnumber its CPUs (its waiting is its configuration, never a neighbour's)."""
    from torch.utils.data import DataLoader
    windows = _Windows(counters)
    at_batch, said = windows.judge(_timed_calls(prepared, (x for x, _ in batches), MAX_CALLS, MIN_CALLS, agree_more,
                                                windows), limit, self_contended)
    bs = prepared.config.batch_size
    if prepared.ranks.world > 1:
        return Latency.measured(bs, at_batch, batch1_note="not measured with several ranks", **said)
    try:
        ones = (x for x, _ in cycle(DataLoader(val, batch_size=1, collate_fn=collate)))
        for _ in range(WARMUP_CALLS):
            prepared.predict(next(ones))
        prepared.synchronize()
        alone = _Windows(counters)
        batch1, more = alone.judge(_timed_calls(prepared, ones, MAX_BATCH1_CALLS, MIN_BATCH1_CALLS, None, alone),
                                   limit, self_contended)
    except Exception as exc:  # noqa: BLE001 - a configuration that cannot serve one item still has its figures
        note = f"batch 1 failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
        return Latency.measured(bs, at_batch, batch1_note=note, **said)
    return Latency.measured(bs, at_batch, batch1, **said | {"dropped_calls": said["dropped_calls"]
                                                            + more["dropped_calls"]})
