"""``advisor studies``: the studies in a storage, one line each."""

from __future__ import annotations

import argparse

from advisor.cli._common import STORAGE_HELP, open_existing_storage, print_rows

NAME = "studies"
HELP = "List the studies in a storage: model, space, trials by state, when they ran, the metric."
EPILOG = """examples:
  advisor studies                              # the studies in ./advisor.db
  advisor studies --storage sqlite:///runs.db
  advisor studies --json                       # one document: every study's attributes and counts"""


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--storage", help=STORAGE_HELP)
    s.add_argument("--json", action="store_true", help="print the studies as JSON")


def run(args: argparse.Namespace) -> int:
    import optuna

    from advisor.core.stored import read_study
    from advisor.outputs.listing import studies_table, study_line
    from advisor.study.storage import stores
    from advisor.study.storage.guard import shown_url

    storage, url = open_existing_storage(args.storage)
    summaries = optuna.get_all_study_summaries(storage, include_best_trial=False)
    lines = [study_line(read_study(optuna.load_study(study_name=s.study_name, storage=storage)), s.datetime_start)
             for s in summaries if stores.is_advisor_study(s)]
    others = [s.study_name for s in summaries if not stores.is_advisor_study(s)]  # other programs' Optuna studies
    where = shown_url(url)
    if args.json:
        from advisor.outputs.json_output import print_json

        print_json("studies", {"storage": where, "studies": [line.to_dict() for line in lines],
                               "other_studies": others})
        return 0
    if not lines:
        print(f"storage {where} holds no {'advisor ' if others else ''}study yet: run `advisor tune model.py` first")
    else:
        print_rows(studies_table(lines, where))
    if others:
        print(f"also in this storage, not written by advisor (left alone): {', '.join(others)}")
    return 0
