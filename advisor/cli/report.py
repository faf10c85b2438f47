"""``advisor report``: a Markdown report of a study with PNG plots."""

from __future__ import annotations

import argparse

from advisor.cli._common import add_storage_arguments, open_stored_study

NAME = "report"
HELP = "Write a Markdown report of a study with PNG plots (Pareto front, each knob's effect)."
EPILOG = """examples:
  advisor report                               # ./advisor-report/report.md + PNG plots
  advisor report --study digits_cnn-cpu -o share/
  advisor report --storage sqlite:///runs.db --study digits_cnn-default"""


def add_arguments(r: argparse.ArgumentParser) -> None:
    add_storage_arguments(r, "study name (needed when the storage holds several)")
    r.add_argument("-o", "--output", default="advisor-report", help="directory to write (default ./advisor-report)")


def run(args: argparse.Namespace) -> int:
    from advisor.outputs.report import write_report

    study, url = open_stored_study(args)
    path = write_report(study, args.output, url)
    print(f"wrote {path} (and its plots beside it)")
    return 0
