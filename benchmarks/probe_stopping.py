"""Replay probes' stopping rules on recorded step times (``probe_traces.py``): what each
rule costs and how far its figure lands from the trace's own long-run median.

- ``before``: the rule before issue 31 (as it was at 3a0c078): a fixed warm-up of 0.25 s,
  blocks of 0.05 s, at least 10 blocks and 10 steps, stop once the blocks' IQR is within 10%
  of their median, else after 0.75 s of timed steps.
- ``now``: the product's StepTimer (``advisor.machine.timing``), fed the recorded blocks:
  no warm-up wait (MSER cuts the warm-up, ``advisor.core.settle``), stop once the median's
  95% interval is within the tolerance, else at the probe's cap.

The reference is each trace's median over its second half (1.5 s of timed steps by
default, long after any warm-up); the spread between processes is the standard deviation
of those references over a case's repeats. A rule's error is ``log(figure / reference)``.

    python benchmarks/probe_stopping.py                       # results/probe_traces.json
    python benchmarks/probe_stopping.py --tolerance 0.05
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from advisor.core.settle import TOLERANCE  # noqa: E402
from advisor.machine.timing import StepTimer  # noqa: E402
from advisor.study.confirmation.pairing import PROBE_TIMING_S  # noqa: E402

from common import commit  # noqa: E402


def fine_blocks(run: dict) -> list[tuple[float, int]]:
    """The recorded blocks as (seconds, steps), in timed order."""
    k = run["steps_per_block"]
    return [(s * k, k) for s in run["blocks_s"]]


def before(blocks: list[tuple[float, int]], cap: float = 0.75) -> tuple[float, float]:
    """The rule before issue 31: (figure, seconds of steps it ran, warm-up included)."""
    spent, i = 0.0, 0
    while i < len(blocks) and spent < 0.25:  # the fixed warm-up
        spent += blocks[i][0]
        i += 1
    samples: list[float] = []
    acc, steps, timed, total_steps = 0.0, 0, 0.0, 0
    per_block = 0  # steps a block pools, sized from the first timed step as the old timer did
    for seconds, n in blocks[i:]:
        per_block = per_block or math.ceil(0.05 / (seconds / n) - 1e-9)
        acc, steps, timed, total_steps = acc + seconds, steps + n, timed + seconds, total_steps + n
        if steps >= per_block:
            samples.append(acc / steps)
            acc, steps = 0.0, 0
            if len(samples) >= 10 and total_steps >= 10:
                q1, q2, q3 = statistics.quantiles(samples, n=4, method="inclusive")
                if (q3 - q1) / q2 <= 0.10:
                    break
        if timed >= cap and samples:
            break
    return statistics.median(samples), spent + timed


def now(blocks: list[tuple[float, int]], tolerance: float, cap: float) -> tuple[float, float, dict]:
    """The product's timer fed the recorded blocks: (figure, seconds it ran, its timing)."""
    timer = StepTimer(max_seconds=cap, tolerance=tolerance, counters=None)
    for seconds, n in blocks:
        timer.add_steps(seconds, n)
        if timer.done():
            break
    result = timer.result()
    return result.median_s, timer.total_s, result.to_dict()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="?", default=str(HERE / "results" / "probe_traces.json"))
    ap.add_argument("--tolerance", type=float, default=TOLERANCE)
    ap.add_argument("--cap", type=float, default=PROBE_TIMING_S, help="the probe's cap, seconds of timed steps")
    ap.add_argument("-o", "--output", default=str(HERE / "results" / "probe_stopping.json"))
    args = ap.parse_args()
    traces = json.loads(Path(args.traces).read_text())
    rows, errors = [], {"before": [], "now": []}
    for name, case in traces["cases"].items():
        refs, out = [], {"case": name, "runs": []}
        for run in case["runs"]:
            blocks = fine_blocks(run)
            half = blocks[len(blocks) // 2:]
            ref = sum(s for s, _ in half) / sum(n for _, n in half)  # seconds per step over the second half
            refs.append(ref)
            b_fig, b_cost = before(blocks)
            n_fig, n_cost, timing = now(blocks, args.tolerance, args.cap)
            errors["before"].append(abs(math.log(b_fig / ref)))
            errors["now"].append(abs(math.log(n_fig / ref)))
            out["runs"].append({"reference_s": ref, "before": {"figure_s": b_fig, "cost_s": b_cost,
                                                               "error": math.log(b_fig / ref)},
                                "now": {"figure_s": n_fig, "cost_s": n_cost, "error": math.log(n_fig / ref),
                                        "covered": timing["low_s"] <= ref <= timing["high_s"],
                                        "covers_before": timing["low_s"] <= b_fig <= timing["high_s"],
                                        "versus_before": math.log(n_fig / b_fig), "timing": timing}})
        logs = [math.log(r) for r in refs]
        out["between_processes_sd"] = statistics.stdev(logs) if len(logs) > 1 else None
        for rule in ("before", "now"):
            out[rule] = {"cost_s": statistics.median(r[rule]["cost_s"] for r in out["runs"]),
                         "abs_error": statistics.median(abs(r[rule]["error"]) for r in out["runs"])}
        rows.append(out)
        sd = out["between_processes_sd"]
        print(f"{name:18s} cost {out['before']['cost_s']:.2f} -> {out['now']['cost_s']:.2f} s   "
              f"|error| {out['before']['abs_error']:.3f} -> {out['now']['abs_error']:.3f}   "
              f"between processes {sd if sd is None else round(sd, 3)}", file=sys.stderr)
    covered = [r["now"]["covered"] for row in rows for r in row["runs"]]
    covers_before = [r["now"]["covers_before"] for row in rows for r in row["runs"]]
    versus = [abs(r["now"]["versus_before"]) for row in rows for r in row["runs"]]
    capped = [not r["now"]["timing"]["converged"] for row in rows for r in row["runs"]]
    ratio = [r["now"]["cost_s"] / r["before"]["cost_s"] for row in rows for r in row["runs"]]
    doc = {"what": "probes' stopping rules replayed on recorded step times: cost (seconds of steps) and error "
                   "against each trace's long-run median", "command": "python benchmarks/probe_stopping.py "
                   + " ".join(sys.argv[1:]), "date": dt.date.today().isoformat(), "commit": commit(),
           "traces": {"file": args.traces, "commit": traces.get("commit"), "date": traces.get("date")},
           "tolerance": args.tolerance, "cap_s": args.cap,
           "cost_ratio_median": statistics.median(ratio),
           "abs_error_median": {k: statistics.median(v) for k, v in errors.items()},
           "abs_error_p90": {k: statistics.quantiles(v, n=10)[-1] for k, v in errors.items()},
           "interval_covers_reference": sum(covered) / len(covered),
           "interval_covers_before": sum(covers_before) / len(covers_before),
           "abs_log_now_vs_before_median": statistics.median(versus), "capped_share": sum(capped) / len(capped),
           "between_processes_sd_median": statistics.median(r["between_processes_sd"] for r in rows
                                                            if r["between_processes_sd"] is not None),
           "cases": rows}
    Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"cost now/before (median of runs) {doc['cost_ratio_median']:.2f}; |error| median "
          f"{doc['abs_error_median']['before']:.3f} -> {doc['abs_error_median']['now']:.3f}; interval covers the "
          f"reference in {doc['interval_covers_reference']:.0%} of runs, the before rule's figure in "
          f"{doc['interval_covers_before']:.0%}; |log now/before| median {doc['abs_log_now_vs_before_median']:.3f}; "
          f"capped {doc['capped_share']:.0%}; between processes (median sd) {doc['between_processes_sd_median']:.3f}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
