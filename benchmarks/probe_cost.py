"""What a probe costs against the training run it can spare, read from real studies' stored
trials (``phase_s``: the in-trial time of each part; the probe's wall as the driver saw it).

    python benchmarks/probe_cost.py before=/tmp/ab/before-1.db now=/tmp/ab/main-1.db ...

Each argument is ``LABEL=STUDY.db`` (the study in it is read; labels may repeat, their
trials are pooled). Per label: the medians, over the trials that ran both parts, of the
probe's timing phase, the probe's in-trial total, its wall, the training run's in-trial
total and wall, and the ratio of the probe's wall to the training run's (issue 31's
target: at most a third).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import commit  # noqa: E402


def trials_of(path: str) -> list[dict]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{path}"
    rows = []
    for summary in optuna.get_all_study_summaries(url):
        study = optuna.load_study(study_name=summary.study_name, storage=url)
        for t in study.get_trials(deepcopy=False):
            phases, attrs = t.user_attrs.get("phase_s") or {}, t.user_attrs
            if "timing" not in phases:
                continue
            run = attrs.get("accuracy_run") or {}  # the training run, stored beside its probe
            compiled = bool((attrs.get("config") or {}).get("compile"))
            rows.append({"compiled": compiled, "timing_s": phases["timing"], "estimate_s": phases.get("estimate", 0.0),
                         "probe_total_s": phases.get("total"), "probe_wall_s": attrs.get("probe_wall_s"),
                         "training_total_s": (run.get("phase_s") or {}).get("total"),
                         "training_wall_s": run.get("wall_s"), "state": t.state.name})
    return rows


def med(values: list) -> float | None:
    values = [v for v in values if isinstance(v, (int, float))]
    return statistics.median(values) if values else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("studies", nargs="+", help="LABEL=STUDY.db")
    ap.add_argument("-o", "--output", default=str(HERE / "results" / "probe_cost.json"))
    args = ap.parse_args()
    pooled: dict[str, list[dict]] = defaultdict(list)
    for arg in args.studies:
        label, _, path = arg.partition("=")
        pooled[label] += trials_of(path)
    out = {}
    for label, rows in pooled.items():
        both = [r for r in rows if r["training_wall_s"] and r["probe_wall_s"]]
        out[label] = {"probes": len(rows), "with_training_run": len(both),
                      "timing_s": med([r["timing_s"] for r in rows]),
                      "timing_s_not_compiled": med([r["timing_s"] for r in rows if not r["compiled"]]),
                      "estimate_s": med([r["estimate_s"] for r in rows]),
                      "probe_total_s": med([r["probe_total_s"] for r in rows]),
                      "probe_wall_s": med([r["probe_wall_s"] for r in rows]),
                      "training_total_s": med([r["training_total_s"] for r in both]),
                      "training_wall_s": med([r["training_wall_s"] for r in both]),
                      "probe_over_training_wall": med([r["probe_wall_s"] / r["training_wall_s"] for r in both])}
        o = out[label]
        print(f"{label}: {o['probes']} probes, timing {o['timing_s']:.3f} s ({o['timing_s_not_compiled']:.3f} s "
              f"without compile), memory plan {o['estimate_s']:.3f} s, probe wall {o['probe_wall_s']:.2f} s, "
              f"training wall {o['training_wall_s'] or float('nan'):.2f} s, probe/training "
              f"{o['probe_over_training_wall'] or float('nan'):.2f}", file=sys.stderr)
    doc = {"what": "a probe's cost against the training run it can spare, from real studies' stored trials",
           "command": "python benchmarks/probe_cost.py " + " ".join(args.studies), "date": dt.date.today().isoformat(),
           "commit": commit(), "by_label": out}
    Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
