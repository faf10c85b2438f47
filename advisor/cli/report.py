"""``advisor report``: a Markdown report of a study with PNG plots."""

from __future__ import annotations

import argparse

from advisor.cli._common import add_storage_arguments, open_stored_study

NAME = "report"
HELP = "Write a Markdown report of a study with PNG plots (Pareto front, each knob's effect)."
EPILOG = """examples:
  advisor report                               # ./advisor-report/report.md + PNG plots
  advisor report --study digits_cnn-cpu -o share/
  advisor report --storage sqlite:///runs.db --study digits_cnn-default
  advisor report --json > report.json          # the files written and the report's figures as JSON"""


def add_arguments(r: argparse.ArgumentParser) -> None:
    add_storage_arguments(r, "study name (needed when the storage holds several)")
    r.add_argument("-o", "--output", default="advisor-report", help="directory to write (default ./advisor-report)")
    r.add_argument("--json", action="store_true",
                   help="also print the report's figures (front, picks, knob effects, counts) and file paths as JSON")


def run(args: argparse.Namespace) -> int:
    from advisor.outputs.report import report_data, write_report

    study, url = open_stored_study(args)
    path = write_report(study, args.output, url)
    if args.json:
        from advisor.outputs.json_output import print_json
        from advisor.study.storage.guard import shown_url

        print_json("report", report_data(study, path, shown_url(url)))
        return 0
    print(f"wrote {path} (and its plots beside it)")
    return 0
