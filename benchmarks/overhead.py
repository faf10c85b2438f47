"""Where does a study's wall time go? Runs a real study (real Ray, real SQLite, real
trials) in this process with timers around the driver's parts, and sets the wall time
against the compute measured inside the trials.

    python benchmarks/overhead.py                 # the default study: digits_mlp, default space, 20 trials
    python benchmarks/overhead.py --tiny          # 2 trials of the quick space: proves it runs

Breakdown: Ray start; preflight (model.py built once in the driver); per trial, the
driver-side wall (submit to result) split into in-trial compute (build, train, evaluate,
timing: the figures themselves), the Ray task's dispatch and return, the trial process's
start (a fork of the warm fork server, advisor/trial/forkserver.py; the first trial also starts the
fork server), imports and data loading inside the trial, and the rest of the trial's own
time (optimizer construction, result assembly: "in_trial_unattributed"), apart from the
memory estimate made before each trial; and in the
driver, the sampler (study.ask and the space's sampling) and storage (tell, attributes).
overhead fraction = 1 - compute / wall; fixed cost per trial = (trial wall - compute) / trials.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import commit  # noqa: E402

TIMERS: dict[str, float] = defaultdict(float)


@contextmanager
def timed(name: str) -> Iterator[None]:
    t = time.perf_counter()
    try:
        yield
    finally:
        TIMERS[name] += time.perf_counter() - t


def _wrap(owner: Any, attr: str, name: str) -> Any:
    original = getattr(owner, attr)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with timed(name):
            return original(*args, **kwargs)

    setattr(owner, attr, wrapper)
    return lambda: setattr(owner, attr, original)


@contextmanager
def instrumented() -> Iterator[None]:
    """Timers around the sampler and the storage calls the driver makes (this process
    only; removed again on exit)."""
    import optuna

    from advisor.search.space import SearchSpace

    undo = [_wrap(optuna.Study, "ask", "sampler"), _wrap(SearchSpace, "sample", "sampler")]
    undo += [_wrap(optuna.Study, attr, "storage") for attr in ("tell", "enqueue_trial", "get_trials")]
    undo += [_wrap(optuna.Trial, attr, "storage") for attr in ("set_user_attr", "set_constraint")]
    try:
        yield
    finally:
        for fn in reversed(undo):
            fn()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(HERE.parent / "examples" / "digits_mlp.py"))
    ap.add_argument("--space", default="default")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("-o", "--output", default=str(HERE / "results" / "overhead.json"))
    args = ap.parse_args()
    if args.tiny:
        args.space, args.trials = "quick", 2

    import tempfile

    import optuna

    from advisor.core.events import Event, Finished
    from advisor.core.results import COMPUTE_PHASES
    from advisor.study.options.tune_options import TuneOptions
    from advisor.study.run.plan import plan_study
    from advisor.study.run.tuner import Tuner

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    TIMERS.clear()
    finished: list[dict[str, Any]] = []

    def on_event(event: Event) -> None:
        if isinstance(event, Finished):
            finished.append({"wall_s": event.wall_s, "phase_s": dict(event.result.phase_s), "ok": event.result.ok})

    wall0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="adv-over-") as tmp, instrumented():
        options = TuneOptions(workload_path=args.model, space=args.space, trials=args.trials,
                              storage=f"sqlite:///{Path(tmp) / 'overhead.db'}", confirm=False, metric_seeds=1)
        with timed("preflight"):
            plan = plan_study(options)
        tuner = Tuner(plan, on_event=on_event)
        with timed("ray_start"):
            tuner.start_executor()
        tuner.run()
    wall = time.perf_counter() - wall0
    n = len(finished)
    trial_wall = sum(f["wall_s"] for f in finished)

    def spent(*phases: str) -> float:
        """Seconds in these phases over every trial, its training part's ("training_" + phase)
        included: a trial with two-stage evaluation runs a probe and a training process."""
        return sum(v for f in finished for k, v in f["phase_s"].items() if k.removeprefix("training_") in phases)

    compute = spent(*COMPUTE_PHASES)  # as TrialResult.compute_s counts it
    in_worker = spent("total")
    started = spent("process_start")
    imports = spent("import")
    loading = spent("load")
    launch = spent("launch")
    baseline = spent("memory_baseline")
    estimate = spent("estimate")  # the memory plan, before each trial
    parts = {
        "ray_start_s": TIMERS["ray_start"], "preflight_s": TIMERS["preflight"],
        "worker_spawn_and_return_s": trial_wall - in_worker - started,
        "trial_process_start_s": started,
        "worker_imports_s": imports,
        "worker_data_loading_s": loading,
        "memory_baseline_s": baseline,
        "memory_estimate_s": estimate,
        "in_trial_unattributed_s": in_worker - compute - imports - loading - launch - baseline - estimate,
        "sampler_s": TIMERS["sampler"], "storage_s": TIMERS["storage"],
        "in_trial_compute_s": compute,
    }
    parts["other_s"] = wall - compute - sum(v for k, v in parts.items() if k != "in_trial_compute_s")
    doc = {"what": "wall time of a real study against the compute measured inside its trials",
           "command": " ".join(["python", *sys.argv]), "model": args.model, "space": args.space,
           "trials": n, "date": dt.date.today().isoformat(), "commit": commit(), "wall_s": wall,
           "trial_wall_s": trial_wall, "breakdown": parts, "fraction": 1 - compute / wall,
           "fixed_per_trial_s": (trial_wall - compute) / n if n else None,
           "per_trial": finished}
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("wall_s", "trials", "fraction", "fixed_per_trial_s", "breakdown")},
                     indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
