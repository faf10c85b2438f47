"""``advisor tune model.py``: plan the study, run it (with the live explorer in an
interactive terminal), print the summary."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from advisor.cli._common import STORAGE_HELP, add_confirm_arguments, load_tui
from advisor.core.errors import StudyError
from advisor.core.noise import ACCURACY_SEEDS
from advisor.core.results import WORKLOADS
from advisor.core.units import parse_size

if TYPE_CHECKING:
    from advisor.outputs.console import TuneOutput
    from advisor.study.tuner import StudyOutcome, Tuner

NAME = "tune"
HELP = "Search for the configurations that make model.py fastest, smallest and accurate."
EPILOG = """In an interactive terminal the live explorer shows the trials as they finish (q stops the
study gracefully); --no-tui, --json or a pipe give plain output.

examples:
  advisor tune examples/digits_cnn.py                      # 20 trials, default space, ./advisor.db
  advisor tune model.py --trials 50 --space eager --timeout 3600
  advisor tune examples/digits_cnn.py --space cpu          # + DDP/FSDP, pruning, QAT on this CPU
  advisor tune examples/digits_inference.py --workload inference
  advisor tune model.py --storage postgresql://me@db/advisor --ray-address auto
  advisor tune model.py --max-metric-drop 0.005 --memory-cap 2GiB --json
  advisor tune lm.py --max-metric-drop 2%                  # perplexity at most 2% worse than the baseline's"""


def add_arguments(t: argparse.ArgumentParser) -> None:
    t.add_argument("model", help="path to a model.py that follows the contract (see README)")
    t.add_argument("--workload", default="train", choices=WORKLOADS,
                   help="train (default): time training steps, accuracy after a fixed number of samples; "
                        "inference: time forward passes of the trained model, no training")
    t.add_argument("--space", help="preset name or YAML file (default: default, or inference with --workload inference)")
    t.add_argument("--trials", type=int, default=20, help="the study's total number of measured trials (default 20)")
    t.add_argument("--storage", help=STORAGE_HELP)
    t.add_argument("--study", help="study name (default: MODEL-SPACE); re-running resumes it")
    t.add_argument("--timeout", type=float, help="wall-clock budget of the whole study, seconds")
    t.add_argument("--trial-timeout", type=float,
                   help="limit for one trial, seconds (default: 10x the baseline trial, at least 120)")
    drop = t.add_mutually_exclusive_group()
    drop.add_argument("--max-metric-drop", type=_drop, default=None, metavar="AMOUNT|PCT%",
                      help="feasible trials are at most this much worse than the baseline on the metric: an "
                           "amount of it (default 0.01: 1 point of a fraction such as accuracy), or a percentage "
                           "of the baseline's (2%%); 'worse' follows the metric's direction (model.py's METRIC)")
    drop.add_argument("--max-accuracy-drop", type=_drop, default=None, dest="max_accuracy_drop",
                      help="the same as --max-metric-drop (its older name)")
    t.add_argument("--memory-cap", help="feasible trials peak below this, e.g. 2GiB or 500MiB")
    t.add_argument("--train-samples", type=int, help="samples each trial trains on before evaluation "
                   "(default: 5 epochs of the training set)")
    t.add_argument("--sampler", default="default",
                   help="default: the baseline with one knob changed first (up to 8 trials), then TPE; "
                        "or plain tpe, nsga2, random, gp (gp needs scipy: pip install 'advisor[gp]')")
    t.add_argument("--seed", type=int, default=0, help="seed of the sampler and of every trial (default 0)")
    t.add_argument("--ray-address", help="join this Ray cluster instead of starting a local one")
    t.add_argument("--skip-preflight", action="store_true",
                   help="do not build the model in the driver first (for models too large for it)")
    add_confirm_arguments(t)
    t.add_argument("--confirm", action=argparse.BooleanOptionalAction, default=None,
                   help="confirm the front in pairs against the baseline at the end (default: on, or "
                        "$ADVISOR_CONFIRM=0 for off); --no-confirm leaves the ratios unconfirmed (advisor confirm "
                        "runs it later)")
    t.add_argument("--accuracy-seeds", type=int, default=None,
                   help="train the baseline with this many seeds to measure the metric's noise "
                        "(default 3, or $ADVISOR_ACCURACY_SEEDS; 1: no estimate)")
    t.add_argument("--accuracy", default="selective",
                   help="selective (default): probe every configuration's speed and memory, and train only "
                        "those that could still reach the feasible front (two-stage evaluation); all: train "
                        "every configuration in full, as one process per trial")
    t.add_argument("--ignore-doctor", action="store_true",
                   help="keep the options that failed `advisor doctor` on this machine (by default they are "
                        "dropped, each with the reason)")
    t.add_argument("--json", action="store_true", help="print the summary as JSON")
    t.add_argument("--no-tui", action="store_true",
                   help="plain progress lines even in an interactive terminal (default there: the live explorer)")


def run(args: argparse.Namespace) -> int:
    import optuna

    from advisor.outputs.console import TuneOutput
    from advisor.study.options import TuneOptions
    from advisor.study.plan import plan_study
    from advisor.study.tuner import Tuner

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # advisor reports trials itself
    drop = args.max_metric_drop or args.max_accuracy_drop or (0.01, False)
    options = TuneOptions(
        workload_path=args.model, space=args.space, workload=args.workload, storage=args.storage, study_name=args.study,
        trials=args.trials, timeout=args.timeout, trial_timeout=args.trial_timeout,
        max_accuracy_drop=drop[0], max_drop_relative=drop[1], memory_cap=parse_size(args.memory_cap),
        sampler=args.sampler, seed=args.seed, train_samples=args.train_samples,
        ray_address=args.ray_address, skip_preflight=args.skip_preflight, confirm=_confirm_default(args.confirm),
        confirm_top=args.confirm_top, pairs=args.pairs, confirm_target=args.confirm_target,
        accuracy_seeds=_seeds_default(args.accuracy_seeds), accuracy=args.accuracy, ignore_doctor=args.ignore_doctor)
    live = not (args.json or args.no_tui) and sys.stdin.isatty() and sys.stdout.isatty()
    output = TuneOutput(json_mode=args.json)
    plan = plan_study(options)
    output.planned(plan)
    tuner = Tuner(plan, on_event=output.event)
    outcome = _run_live(tuner, output) if live else tuner.run()
    return output.finish(plan, outcome)


def _drop(text: str) -> tuple[float, bool]:
    from advisor.core.metric import parse_drop

    try:
        return parse_drop(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _confirm_default(flag: bool | None) -> bool:
    if flag is not None:
        return flag
    value = os.environ.get("ADVISOR_CONFIRM", "1").strip().lower()
    if value not in ("0", "1", "yes", "no", "true", "false", "on", "off"):
        raise StudyError(f"$ADVISOR_CONFIRM is {value!r}, expected 1 (confirm) or 0 (do not)")
    return value in ("1", "yes", "true", "on")


def _seeds_default(value: int | None) -> int:
    if value is not None:
        return value
    text = os.environ.get("ADVISOR_ACCURACY_SEEDS", str(ACCURACY_SEEDS))
    try:
        return int(text)
    except ValueError:
        raise StudyError(f"$ADVISOR_ACCURACY_SEEDS is {text!r}, expected a whole number (1: no estimate)") from None


def _run_live(tuner: Tuner, output: TuneOutput) -> StudyOutcome:
    """Run the study in a background thread with the explorer attached; when the user
    quits it early the study stops gracefully; the summary is printed afterwards."""
    from advisor.study.background import BackgroundTune

    tuner.start_executor()  # here, in the main thread: the explorer replaces stdio while it runs
    output.quiet = True
    background = BackgroundTune(tuner, also=output.event)
    app = load_tui().make_app(tuner.plan.storage_url, tuner.plan.study_name, live=background)

    def on_sigterm(signum: int, frame: Any) -> None:
        background.stop("interrupted by SIGTERM")
        app.exit()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        app.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if background.running:
            print("stopping: cancelling running trials and recording them ...", file=sys.stderr)
            background.stop(tuner.stop_reason or "interrupted by the user (quit from the explorer)")
    for path in app.exported:
        print(f"exported {path}")
    return background.join()
