"""The process's interference counters, read where a block of timed steps starts and ends
(``advisor.machine.timing``); ``advisor.core.interference`` turns their differences into a
block's score.

Linux only: the run queue from ``/proc/self/task/*/schedstat`` (every thread of the trial
process: time on a CPU, time runnable but waiting for one), steal time from ``/proc/stat``,
involuntary context switches from ``getrusage``, the process's CPU time and its thread
count. Elsewhere ``read_counters`` returns None and blocks carry no fields. On CUDA the
counters describe the host threads, which queue the device's work.
"""

from __future__ import annotations

import os
import time

try:
    _TICK = 1.0 / os.sysconf("SC_CLK_TCK")
except (AttributeError, ValueError, OSError):  # not POSIX
    _TICK = 0.01
_AVAILABLE = os.path.exists("/proc/self/schedstat") and os.path.exists("/proc/stat")


def read_counters() -> dict[str, float] | None:
    """The counters now, or None where they cannot be read."""
    if not _AVAILABLE:
        return None
    try:
        import resource

        run = wait = 0
        tasks = os.listdir("/proc/self/task")
        for tid in tasks:
            try:
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    fields = f.read().split()
            except OSError:  # the thread ended meanwhile
                continue
            run, wait = run + int(fields[0]), wait + int(fields[1])
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
        usage = resource.getrusage(resource.RUSAGE_SELF)
    except (OSError, ValueError, IndexError, ImportError):
        return None
    return {"run_s": run * 1e-9, "wait_s": wait * 1e-9, "steal_s": cpu[7] * _TICK, "cpus_s": sum(cpu) * _TICK,
            "nivcsw": float(usage.ru_nivcsw), "cpu_s": time.process_time(), "threads": float(len(tasks))}


def difference(start: dict[str, float] | None, end: dict[str, float] | None) -> dict[str, float]:
    """What happened between two readings (``threads``: the end's); empty without both."""
    if start is None or end is None:
        return {}
    return {k: (end[k] if k == "threads" else end[k] - start[k]) for k in end if k in start}


def accumulate(total: dict[str, float], more: dict[str, float]) -> dict[str, float]:
    """Two stretches' differences added (``threads``: the larger)."""
    if not total or not more:
        return dict(more or total)
    return {k: (max(total[k], v) if k == "threads" else total[k] + v) for k, v in more.items() if k in total}
