"""Can the numbers be trusted? The same configuration measured in fresh trials (spread of
throughput and peak memory), and two studies run with the same seed (do their trials
rank alike, do their fronts agree?). Real trials on a real local Ray.

    python benchmarks/fidelity.py                 # 5 repeats + two 10-trial studies of digits_cnn
    python benchmarks/fidelity.py --tiny          # 2 repeats + two 2-trial studies of the MLP

Throughput CV = stdev / mean over the repeats; memory spread = (max - min) / median.
Rank agreement = Spearman correlation of throughput over the configurations both studies
measured; front agreement = shared front configurations / all front configurations.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import commit  # noqa: E402


def spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3:
        return None

    def ranks(xs: list[float]) -> list[float]:
        order = sorted(range(len(xs)), key=lambda i: xs[i])
        r = [0.0] * len(xs)
        for rank, i in enumerate(order):
            r[i] = float(rank)
        return r

    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return cov / var if var else None


def repeats(model: str, n: int, executor, settings) -> list[dict]:
    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialPayload
    from advisor.runner.executor import run_one
    from advisor.workload.contract import load_workload

    workload = load_workload(model)
    config = TrialConfig.from_dict(workload.baseline)
    out = []
    for i in range(n):
        r = run_one(executor, i, TrialPayload.of(workload, config, settings), timeout=600)
        assert r.ok, r.failure_message
        out.append({"throughput": r.throughput, "peak_memory_bytes": r.peak_memory_bytes, "accuracy": r.score,
                    "rel_iqr": r.step_time_iqr_s / r.step_time_median_s})
        print(f"repeat {i + 1}: {r.throughput:,.0f} samples/s, {r.peak_memory_bytes / 2**20:.1f} MiB", flush=True)
    return out


def study(model: str, space: str, trials: int, storage: str, name: str, train_samples: int):
    import optuna

    from advisor.core.stored import read_study
    from advisor.study.options.tune_options import TuneOptions
    from advisor.study.run.plan import plan_study
    from advisor.study.run.tuner import Tuner

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    plan = plan_study(TuneOptions(workload_path=model, space=space, trials=trials, seed=0, storage=storage,
                                  study_name=name, train_samples=train_samples, confirm=False,
                                  metric_seeds=1))
    return read_study(Tuner(plan).run().study)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(HERE.parent / "examples" / "digits_cnn.py"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--space", default="quick")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("-o", "--output", default=str(HERE / "results" / "fidelity.json"))
    args = ap.parse_args()
    if args.tiny:
        args.model, args.repeats, args.trials = str(HERE.parent / "examples" / "digits_mlp.py"), 2, 2

    from advisor.core.results import TrialSettings, default_train_samples
    from advisor.machine.hardware import detect, fingerprint
    from advisor.runner.ray_executor import RayExecutor
    from advisor.workload.contract import load_workload
    from advisor.workload.preflight import preflight

    started = time.perf_counter()
    hw = detect()
    facts = preflight(load_workload(args.model))
    samples = 300 if args.tiny else default_train_samples(facts["train_size"])
    executor = RayExecutor(hw.device).start()
    try:
        # --tiny (the suite's smoke run) times each repeat to +-25%, as the suite's studies do
        timing = {"timing_tolerance": 0.25, "max_timing_s": 1.0} if args.tiny else {}
        runs = repeats(args.model, args.repeats, executor,
                       TrialSettings(train_samples=samples, device=hw.device, **timing))
    finally:
        executor.shutdown()
    thr = [r["throughput"] for r in runs]
    mem = [r["peak_memory_bytes"] for r in runs]
    with tempfile.TemporaryDirectory(prefix="adv-fid-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'fidelity.db'}"
        a, b = (study(args.model, args.space, args.trials, url, f"run-{i}", samples) for i in "ab")
        by_config = [{r.config.key(): r.figures.throughput for r in s.records if r.state == "complete"}
                     for s in (a, b)]
        common = sorted(set(by_config[0]) & set(by_config[1]))
        fronts = [{r.config.key() for r in s.front()} for s in (a, b)]
    doc = {
        "what": "repeatability of one configuration, and of two studies with the same seed",
        "command": " ".join(["python", *sys.argv]), "model": args.model, "date": dt.date.today().isoformat(),
        "commit": commit(), "hardware": fingerprint(hw), "wall_s": time.perf_counter() - started,
        "repeats": runs,
        "throughput_cv": statistics.stdev(thr) / statistics.fmean(thr) if len(thr) > 1 else None,
        "memory_spread": (max(mem) - min(mem)) / statistics.median(mem),
        "studies": {"space": args.space, "trials": args.trials, "configurations_in_both": len(common),
                    "throughput_rank_correlation": spearman([by_config[0][k] for k in common],
                                                            [by_config[1][k] for k in common]),
                    "front_sizes": [len(f) for f in fronts],
                    "front_agreement": len(fronts[0] & fronts[1]) / max(1, len(fronts[0] | fronts[1]))},
    }
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("throughput_cv", "memory_spread", "studies")}, indent=1))
    print(f"wrote {out}")
    return 0



if __name__ == "__main__":
    sys.exit(main())
