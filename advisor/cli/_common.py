"""What several commands share: the storage option, opening a storage or a stored study,
loading the explorer."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from advisor.core.errors import AdvisorError
from advisor.study.options.tune_options import STORAGE_HELP

if TYPE_CHECKING:
    from advisor.core.stored import StoredStudy


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands' parsers of ``advisor``'s parser, by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def add_storage_arguments(p: argparse.ArgumentParser, study_help: str) -> None:
    p.add_argument("--storage", help=STORAGE_HELP)
    p.add_argument("--study", help=study_help)


def open_stored_study(args: argparse.Namespace) -> tuple[StoredStudy, str]:
    """The study ``--study`` names in ``--storage`` (which must exist), read, and the
    storage URL. Raises StudyError for a missing storage, an empty one or an unknown name."""
    from advisor.core.stored import read_study
    from advisor.study.storage import stores

    storage, url = open_existing_storage(args.storage)
    return read_study(stores.load(storage, args.study, url)), url


def load_tui() -> Any:
    """The explorer package, imported only when a command shows it (the engine never
    imports textual or the explorer)."""
    try:
        from advisor import tui
    except ImportError as exc:
        raise AdvisorError(f"the explorer needs textual and textual-plotext ({exc}); "
                           "reinstall advisor: pip install advisor") from None
    return tui


def open_existing_storage(explicit: str | None) -> tuple[Any, str]:
    """The storage ``--storage`` names (default $ADVISOR_STORAGE or sqlite:///advisor.db),
    opened for reading, and its URL. Raises StudyError for a bad URL or a storage that does
    not exist (a missing SQLite file is not created)."""
    import optuna

    from advisor.study.storage import stores

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = stores.storage_url(explicit)
    return stores.open_storage(url, must_exist=True), url


def print_rows(table: Any) -> None:
    """A rich table of one row per study or trial: as wide as a terminal (or ``COLUMNS``,
    when set), and unwrapped in logs and pipes otherwise (one line per row, whatever its
    length)."""
    import os

    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal and not os.environ.get("COLUMNS", "").strip().isdigit():
        console.width = 1000
    _fit(table, console.width)
    console.print(table)


def _fit(table: Any, width: int) -> None:
    """Give each column of a table wider than ``width`` a width that fits: the widest column
    above its floor gives a character until the table fits. A figure column's floor is its
    longest word (at most 20: it wraps between words, never inside one); a text column's
    (left-justified: the configuration, a failure) is 8, and it wraps, folding a long word.
    Past every floor, rich narrows the columns evenly and they fold (a word goes on over
    two lines rather than end in an ellipsis: nothing shown is lost)."""
    columns = table.columns
    texts = [[str(column.header), *(getattr(c, "plain", str(c)) for c in column.cells)] for column in columns]
    widths = [max((len(line) for t in cells for line in t.splitlines()), default=1) for cells in texts]
    longest_word = [max((len(word) for t in cells for word in t.split()), default=1) for cells in texts]
    floors = [min(w, 8 if c.justify == "left" else min(word, 20))
              for c, w, word in zip(columns, widths, longest_word)]
    chrome = 3 * len(columns) + 1  # borders and the cells' padding
    if sum(widths) + chrome <= width:
        return
    for column in columns:
        column.overflow = "fold"
    while sum(widths) + chrome > width:
        spare = [w - f for w, f in zip(widths, floors)]
        i = max(range(len(widths)), key=spare.__getitem__)
        if spare[i] <= 0:
            return
        widths[i] -= 1
    for column, w in zip(columns, widths):
        column.width = w
