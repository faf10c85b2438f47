"""``advisor COMMAND``: the parser, the dispatch, and how an error becomes a message and
an exit status (0 done, 2 bad input, 1 failure at run time, 130 interrupted, 141 stdout
closed by its reader). Heavy imports (torch, ray, optuna, textual) happen inside the
commands, so ``--help`` is fast."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from types import ModuleType
from typing import NoReturn

from advisor.cli import (
    completion,
    confirm,
    dashboard,
    doctor,
    explore,
    export,
    hardware,
    init,
    measure,
    report,
    spaces,
    studies,
    trials,
    tune,
)
from advisor.core.errors import AdvisorError
from advisor.core.version import VERSION

COMMANDS: dict[str, ModuleType] = {
    m.NAME: m for m in (tune, confirm, hardware, doctor, spaces, export, explore, measure, report, studies, trials,
                        dashboard, init, completion)}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="advisor", description="Auto-tuning optimization advisor for PyTorch.",
                                epilog="Run `advisor COMMAND --help` for a command's options and examples.")
    p.add_argument("--version", action="version", version=f"advisor {VERSION}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        command = sub.add_parser(name, help=module.HELP, description=module.HELP, epilog=module.EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(command)
    p.commands = sub.choices  # type: ignore[attr-defined]  # each command's parser, for its own errors
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args, extra = p.parse_known_args(argv)
    if extra:  # said by the command's parser: `advisor measure: error: ...`, its usage above it
        p.commands.get(args.command, p).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        p.print_help()
        return 2
    args.parser = p  # the whole command line, for a command that describes it (completion)
    was_null = _stdout_is_null()
    try:
        _project_defaults(p, args, sys.argv[1:] if argv is None else argv)
        return int(COMMANDS[args.command].run(args))
    except AdvisorError as exc:
        print(f"advisor {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"advisor {args.command}: aborted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `advisor trials --json | head`: the reader left; no traceback for that
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the flush at exit must not fail again
        return 141  # 128 + SIGPIPE, what a shell reports for a command killed by it
    except SystemExit as exc:  # rich's console meets a broken pipe by pointing stdout at /dev/null and exiting 1
        if exc.code == 1 and not was_null and _stdout_is_null():
            return 141  # `advisor hardware | head -1`: the reader left, as above
        raise


def entry() -> NoReturn:
    """The ``advisor`` command (and ``python -m advisor``): ``main`` on the process's own
    arguments, then exit with its status. The heap is frozen first (``gc.freeze``): the
    interpreter's last full collection at exit otherwise walks every object torch, Ray,
    optuna and rich made, only to free memory the process hands back anyway (1.0-1.5 s
    after `advisor tune` on a 2-core machine, none of it the user's). Exit handlers, thread
    joins and reference counting still run as usual, so files are flushed and closed."""
    code = main()
    gc.freeze()
    sys.exit(code)


def _stdout_is_null() -> bool:
    """Whether stdout is /dev/null (as rich leaves it after a broken pipe)."""
    try:
        return os.path.samestat(os.fstat(sys.stdout.fileno()), os.stat(os.devnull))
    except (OSError, ValueError, AttributeError):  # no stdout, or one without a file descriptor
        return False



def _project_defaults(p: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str]) -> None:
    """The options the command line left out, from the project's [tool.advisor] table, said on stderr."""
    from advisor.cli.project_defaults import apply_project_defaults

    path, applied = apply_project_defaults(p, args, argv)
    if applied:
        said = ", ".join(f"{s.key} = {json.dumps(_plain(s.value))}" for s in applied)
        print(f"advisor {args.command}: from [tool.advisor] in {path}: {said}", file=sys.stderr)


def _plain(value: object) -> object:
    """A value as the table wrote it (a parsed --max-metric-drop is a tuple)."""
    return list(value) if isinstance(value, tuple) else value
