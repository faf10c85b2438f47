"""A study's fixed cost once everything is warm: `advisor tune` run in this process, one
trial of digits_mlp each, after one warm-up study (Ray, its worker and the fork server
started). What is left is the driver's own time per study: planning, storage, the claimed
steps, the baseline's probe and training run.

    python benchmarks/warm_study.py                # 5 studies after the warm-up
    python benchmarks/warm_study.py --studies 2    # proves it runs

Compare two commits by running it in each checkout, alternately (timings here move 5-30%
between identical runs).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import commit  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=5)
    ap.add_argument("-o", "--output", default=str(HERE / "results" / "warm_study.json"))
    args = ap.parse_args()
    os.environ.update(ADVISOR_CONFIRM="0", ADVISOR_METRIC_SEEDS="1", ADVISOR_HOME=tempfile.mkdtemp())
    work = Path(tempfile.mkdtemp(prefix="warm-study-"))
    os.chdir(work)
    from advisor.cli.main import main as advisor
    from advisor.runner.ray_executor import RayExecutor

    RayExecutor("cpu", state_dir=Path(tempfile.mkdtemp(prefix="advr-"))).start()
    model = str(HERE.parent / "examples" / "digits_mlp.py")
    argv = ["tune", model, "--space", "quick", "--trials", "1", "--no-tui", "--train-samples", "128"]
    walls = []
    for i in range(args.studies + 1):  # the first warms Ray's worker and the fork server
        t = time.perf_counter()
        if advisor([*argv, "--study", f"s{i}"]) != 0:
            raise SystemExit(f"study s{i} failed")
        walls.append(time.perf_counter() - t)
    doc = {"what": "wall time of a 1-trial digits_mlp study run in-process once Ray, its worker and the fork "
                   "server are warm", "command": "python benchmarks/warm_study.py", "date": dt.date.today().isoformat(),
           "commit": commit(), "warm_up_s": walls[0], "walls_s": walls[1:],
           "median_s": statistics.median(walls[1:])}
    Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"median {doc['median_s']:.2f} s over {args.studies} studies (warm-up {walls[0]:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
