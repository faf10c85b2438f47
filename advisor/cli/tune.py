"""``advisor tune model.py``: plan the study, run it (with the live explorer in an
interactive terminal), print the summary."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import TYPE_CHECKING, Any

from advisor.cli._common import load_tui
from advisor.cli._options import add_option_arguments, tune_options

if TYPE_CHECKING:
    from advisor.outputs.console import TuneOutput
    from advisor.study.run.background import BackgroundTune
    from advisor.study.run.tuner import StudyOutcome

NAME = "tune"
HELP = "Search for the configurations that make model.py fastest and smallest while its metric holds."
EPILOG = """In an interactive terminal the live explorer shows the trials as they finish (q stops the
study gracefully); --no-tui, --json or a pipe give plain output.

examples:
  advisor tune examples/digits_cnn.py                      # 20 trials, default space, ./advisor.db
  advisor tune model.py --trials 50 --space eager --timeout 3600
  advisor tune examples/digits_cnn.py --space cpu          # + DDP/FSDP, pruning, QAT on this CPU
  advisor tune examples/digits_inference.py --workload inference
  advisor tune model.py --storage postgresql://me@db/advisor --ray-address auto
  advisor tune model.py --max-metric-drop 0.005 --memory-cap 2GiB --json
  advisor tune lm.py --max-metric-drop 2%                  # perplexity at most 2% worse than the baseline's
  advisor tune model.py --log-to mlflow,tensorboard        # each trial to MLflow and TensorBoard as it is stored
  advisor tune model.py --log-to wandb:my-team/tuning      # a W&B project (WANDB_MODE=offline: sync it later)"""


def add_arguments(t: argparse.ArgumentParser) -> None:
    t.add_argument("model", help="path to a model.py that follows the contract (see README)")
    add_option_arguments(t)  # advisor.study.options.tune_options.TuneOptions declares them, with their help
    t.add_argument("--json", action="store_true", help="print the summary as JSON")
    t.add_argument("--no-tui", action="store_true",
                   help="plain progress lines even in an interactive terminal (default there: the live explorer)")


def run(args: argparse.Namespace) -> int:
    import optuna

    from advisor.core.events import chain
    from advisor.outputs.console import TuneOutput
    from advisor.outputs.dashboard import DashboardNotes
    from advisor.outputs.trackers import open_trackers
    from advisor.study.run.background import BackgroundTune
    from advisor.study.run.plan import plan_study
    from advisor.study.run.tuner import Tuner

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # advisor reports trials itself
    options = tune_options(args)
    live = not (args.json or args.no_tui) and sys.stdin.isatty() and sys.stdout.isatty()
    output = TuneOutput(json_mode=args.json)
    plan = plan_study(options)
    trackers = open_trackers(plan)  # --log-to: one that cannot log is refused here, before Ray starts
    output.planned(plan)
    notes = DashboardNotes(plan.storage_url, plan.study_name)  # optuna-dashboard's notes, when it is installed
    listener = chain(output.event, trackers.event, notes.event)  # in the study's thread, after the console
    background = BackgroundTune(plan, also=listener) if live else None  # its tuner's events go to it
    tuner = background.tuner if background is not None else Tuner(plan, on_event=listener)
    trackers.notify = notes.notify = lambda event: tuner.emit(event)  # their notes go where the study's events go
    try:
        outcome = _run_live(background, output) if background is not None else tuner.run()
    except BaseException:
        trackers.close(None)  # the trackers' study runs closed as failed
        raise
    output.quiet = False  # the explorer is closed: the last notes print
    trackers.notify = notes.notify = output.event
    trackers.close(outcome)
    notes.close()  # every note, on the final front and picks
    return output.finish(plan, outcome)


def _run_live(background: BackgroundTune, output: TuneOutput) -> StudyOutcome:
    """Run the study in a background thread with the explorer attached; when the user
    quits it early the study stops gracefully; the summary is printed afterwards."""
    tuner = background.tuner
    tuner.start_executor()  # here, in the main thread: the explorer replaces stdio while it runs
    output.quiet = True
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
