"""``advisor confirm``: run (or extend) paired confirmation of a stored study's front."""

from __future__ import annotations

import argparse

from advisor.cli._common import add_storage_arguments
from advisor.cli._options import add_confirm_arguments, add_log_to, add_ray_address, log_to

NAME = "confirm"
HELP = "Confirm a stored study's front in pairs against the baseline (or add pairs to it)."
EPILOG = """Each pair runs the baseline, the configuration and the baseline again in fresh
processes (timing and peak memory only), every round with runs of its own. Pairs already
stored are kept; the pairs of this run are a new sitting (up to --pairs in all), and the
interval shown pools the sittings as random effects: a ratio that moved between sittings
widens it.

examples:
  advisor confirm                                   # the only study in ./advisor.db
  advisor confirm --study digits_cnn-default --pairs 12
  advisor confirm --confirm-top 3 --confirm-target 0.02 --json
  advisor confirm --log-to mlflow,tensorboard             # the pairs to the runs advisor tune logged"""


def add_arguments(c: argparse.ArgumentParser) -> None:
    add_storage_arguments(c, "study name (needed when the storage holds several)")
    add_confirm_arguments(c)
    c.add_argument("--model", help="the model.py the study ran (default: the path the study recorded); it must "
                                   "be the same file (its content hash is checked)")
    c.add_argument("--trial-timeout", type=float, default=600.0, help="limit for one run, seconds (default 600)")
    add_ray_address(c, "join this Ray cluster instead of starting a local one")
    add_log_to(c)
    c.add_argument("--json", action="store_true", help="print the confirmations as JSON")


def run(args: argparse.Namespace) -> int:
    import optuna
    from rich.console import Console

    from advisor.core.errors import StudyError
    from advisor.core.events import chain
    from advisor.core.stored import read_study
    from advisor.outputs.console import TuneOutput, front_table
    from advisor.outputs.dashboard import DashboardNotes
    from advisor.outputs.json_output import print_json
    from advisor.outputs.trackers import open_confirm_trackers
    from advisor.study.confirmation.confirm import ConfirmOptions, check_confirm_options, confirm_study
    from advisor.study.run.tuner import StudyOutcome
    from advisor.study.storage import stores

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not args.trial_timeout > 0:
        raise StudyError(f"--trial-timeout must be a positive number of seconds, found {args.trial_timeout}")
    options = check_confirm_options(ConfirmOptions(args.confirm_top, args.pairs, args.confirm_target))
    trackers_named = log_to(args)
    url = stores.storage_url(args.storage)
    study = stores.load(stores.open_storage(url, must_exist=True), args.study, url)
    output = TuneOutput(json_mode=args.json)
    notes = DashboardNotes(url, study.study_name)  # optuna-dashboard's notes, when it is installed
    trackers = open_confirm_trackers(read_study(study) if trackers_named else None, trackers_named)  # before Ray
    notes.notify = trackers.notify = output.event
    try:
        confirmations = confirm_study(study, options, args.ray_address, args.trial_timeout, args.model,
                                      on_event=chain(output.event, trackers.event, notes.event))
    except BaseException:
        trackers.close(None)  # the runs it started are closed, the study's marked interrupted
        raise
    notes.close()
    trackers.close(StudyOutcome(study, None))
    stored = read_study(study)
    if args.json:
        print_json("confirm", {"study": stored.name,
                               "confirmations": [c.to_dict() for c in confirmations.values()]})
        return 0
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 160
    console.print(front_table(stored))
    return 0
