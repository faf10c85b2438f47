"""``advisor trials STUDY``: one study's trials, one line each."""

from __future__ import annotations

import argparse

from advisor.cli._common import STORAGE_HELP, open_existing_storage, print_rows

NAME = "trials"
HELP = "List the trials of a stored study: state, configuration, speed, memory, metric, ratios, failure."
EPILOG = """examples:
  advisor trials digits_cnn-default            # its trials, from ./advisor.db
  advisor trials                               # the only study in the storage
  advisor trials compat --storage sqlite:///runs.db --json
  advisor trials --study compat --storage sqlite:///runs.db   # --study as the other commands take it"""


def add_arguments(t: argparse.ArgumentParser) -> None:
    t.add_argument("study", nargs="?", metavar="STUDY",
                   help="study name (default: the only one in the storage; `advisor studies` lists them)")
    t.add_argument("--study", dest="study_flag", metavar="STUDY",
                   help="the same, as export, report and tui take it")
    t.add_argument("--storage", help=STORAGE_HELP)
    t.add_argument("--json", action="store_true", help="print the trials as JSON")


def run(args: argparse.Namespace) -> int:

    from advisor.core.errors import StudyError
    from advisor.core.stored import read_study
    from advisor.outputs.listing import trial_lines, trials_table
    from advisor.study.storage import stores
    from advisor.study.storage.guard import shown_url

    if args.study and args.study_flag and args.study != args.study_flag:
        raise StudyError(f"two studies named: {args.study!r} and --study {args.study_flag!r}; name one")
    storage, url = open_existing_storage(args.storage)
    study = read_study(stores.load(storage, args.study or args.study_flag, url))
    lines = trial_lines(study)
    if args.json:
        from advisor.outputs.json_output import print_json

        print_json("trials", {"study": study.name, "storage": shown_url(url), "metric": study.metric.to_dict(),
                              "baseline": study.baseline.number if study.baseline is not None else None,
                              "trials": [line.to_dict() for line in lines]})
        return 0
    print_rows(trials_table(study, lines))
    return 0
