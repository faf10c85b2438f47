"""A study's options on the command line, read from their one definition
(``advisor.study.options.tune_options.TuneOptions``): the flags ``advisor tune`` (and, for the
confirmation options, ``advisor confirm``) adds, and the options built back from what
was parsed, the environment filling in what the command line left out. An option's older
flags (``Option.aliases``) still work, hidden from ``--help``; using one says so on stderr."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from advisor.study.options.option import Option, options_of
from advisor.study.options.tune_options import TuneOptions

CONFIRM_OPTIONS = ("pairs", "confirm_target", "confirm_top")  # shared by tune and confirm
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TuneOptions)}


def _parsing(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` as an argparse type: its ValueError's reason becomes the error argparse prints."""
    if parse in (int, float):
        return parse  # as they are: argparse and [tool.advisor] read these by name

    def parsed(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parsed.__name__ = getattr(parse, "__name__", "value")
    return parsed


def _add(parser: argparse.ArgumentParser, field: str, o: Option) -> None:
    default = _DEFAULTS[field]
    if o.env or o.aliases:
        default = None  # resolved later: the environment, or whichever of the exclusive flags was given
    where: Any = parser.add_mutually_exclusive_group() if o.aliases else parser
    named: dict[str, Any] = {"help": o.help}
    if isinstance(default, bool) or o.negatable:
        named["action"] = argparse.BooleanOptionalAction if o.negatable else "store_true"
    else:
        named.update(type=_parsing(o.parse) if o.parse else None, choices=o.choices, metavar=o.metavar)
        if o.repeat:
            named["action"] = "append"
    where.add_argument(o.flag, default=default, **{k: v for k, v in named.items() if v is not None})
    for flag in o.aliases:  # deprecated: hidden, still read
        where.add_argument(flag, type=named.get("type"), default=None, help=argparse.SUPPRESS)


def add_option_arguments(parser: argparse.ArgumentParser, fields: Iterable[str] | None = None) -> None:
    """The flags of ``fields`` (default: every option), in the definition's order."""
    wanted = None if fields is None else set(fields)
    for field, o in options_of(TuneOptions).items():
        if wanted is None or field in wanted:
            _add(parser, field, o)


def add_confirm_arguments(parser: argparse.ArgumentParser) -> None:
    """The paired-confirmation flags, shared by tune and confirm."""
    add_option_arguments(parser, CONFIRM_OPTIONS)


def add_log_to(parser: argparse.ArgumentParser) -> None:
    """``--log-to``, as ``advisor tune`` declares it (``advisor confirm``'s)."""
    add_option_arguments(parser, ("log_to",))


def log_to(args: argparse.Namespace) -> tuple[str, ...]:
    """``--log-to`` as parsed by a command other than tune (``add_log_to``), else
    $ADVISOR_LOG_TO, read and checked as tune reads them: a bad entry, or a tracker whose
    library is missing, is a StudyError naming it."""
    from advisor.study.options.tune_options import check_trackers_installed, read_trackers

    value, name = flag_or_env(args, "log_to")
    entries = read_trackers(value or (), name)
    check_trackers_installed(entries, str(options_of(TuneOptions)["log_to"].flag))
    return entries


def flag_or_env(args: argparse.Namespace, field: str) -> tuple[Any, str]:
    """A TuneOptions field as a command other than tune takes it: its flag (that command's
    own argument, dest the option's name), else its environment variable read as tune reads
    it (a StudyError naming the variable); with the name to blame a bad value on. None when
    neither is given."""
    o = options_of(TuneOptions)[field]
    value, name = getattr(args, o.name), str(o.flag)
    variable = next((v for v in o.envs if os.environ.get(v) is not None), None)
    if value is None and variable is not None and o.env_read is not None:
        value, name = o.env_read(os.environ[variable], variable), f"${variable}"
    return value, name


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The options' values from the parsed command line (keyed by field): an older flag's
    value when the newer one is not given (said on stderr: it is deprecated), else the
    environment variable's (or its older name's); an option left at None this way takes
    its default."""
    values = {}
    for field, o in options_of(TuneOptions).items():
        value = getattr(args, o.name)
        for flag, dest in zip(o.flags[1:], o.dests[1:]):
            if value is None and getattr(args, dest) is not None:
                value = getattr(args, dest)
                print(f"advisor: {flag} is deprecated: it is {o.flag} now (the older name still works)",
                      file=sys.stderr)
        variable = next((v for v in o.envs if os.environ.get(v) is not None), None)
        if value is None and variable is not None and o.env_read is not None:
            value = o.env_read(os.environ[variable], variable)
        if value is not None or not (o.env or o.aliases):
            values[field] = value
    return values


def tune_options(args: argparse.Namespace) -> TuneOptions:
    """``advisor tune``'s options from its parsed command line (``args.model`` the workload)."""
    return TuneOptions.given(args.model, given(args), python=False)


def environment() -> dict[str, tuple[str, ...]]:
    """The options whose default an environment variable replaces: argparse dest -> the
    variable and its older names (an older flag's dest too: the same option)."""
    return {dest: o.envs for o in options_of(TuneOptions).values() if o.env for dest in o.dests}


def add_ray_address(parser: argparse.ArgumentParser, help: str) -> None:
    """``--ray-address`` of the commands besides ``advisor tune`` (whose flag is its option's),
    falling back like it to $RAY_ADDRESS, as Ray's own tools do."""
    parser.add_argument("--ray-address", default=os.environ.get("RAY_ADDRESS", "").strip() or None,
                        help=f"{help} (default: $RAY_ADDRESS when set)")
