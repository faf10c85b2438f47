"""``advisor tui``: the explorer for a stored study."""

from __future__ import annotations

import argparse
from pathlib import Path

from advisor.cli._common import add_storage_arguments, load_tui
from advisor.core.errors import StudyError

NAME = "tui"
HELP = "Explore a stored study: Pareto table, scatter plot, trial details; export a config."
EPILOG = """keys: v view (front / all / failed), x / y plot axes, s sort, r reverse, f filter,
      e export the selected trial, ? help, q quit

examples:
  advisor tui                                  # the study in ./advisor.db (a list when there are several)
  advisor tui --study digits_cnn-default
  advisor tui --storage sqlite:///runs.db --export-dir configs/"""


def add_arguments(u: argparse.ArgumentParser) -> None:
    add_storage_arguments(u, "study name (default: the only one, else a list to choose from)")
    u.add_argument("--export-dir", default=".", help="where `e` writes configs (default: the working directory)")


def run(args: argparse.Namespace) -> int:
    if not Path(args.export_dir).is_dir():
        raise StudyError(f"--export-dir {args.export_dir}: not a directory")
    app = load_tui().make_app(args.storage, args.study, export_dir=args.export_dir)
    app.run()
    for path in app.exported:
        print(f"exported {path}")
    return 0
