"""Defaults from the ``[tool.advisor]`` table of the project's pyproject.toml (the nearest
one at or above the working directory)::

    [tool.advisor]              # any command that has the option
    storage = "sqlite:///studies.db"
    trials = 50
    space = "gpu"
    max-metric-drop = "2%"

    [tool.advisor.commands.report]   # this command only (wins over the keys above)
    output = "docs/report"

Keys are long option names without the dashes; values have the option's type (a whole
number, a number, true / false for a flag, a string, a list of strings for a repeatable
option). A relative SQLite (or journal) path in ``storage`` is taken from the
pyproject.toml's folder, so every folder of the project shares one study database; other
values read as they would on the command line. Precedence: the command line, then the
environment ($ADVISOR_STORAGE, $ADVISOR_CONFIRM, $ADVISOR_METRIC_SEEDS), then the
table, then the built-in default. An unknown key or a value of the wrong type is a
ConfigError (exit status 2) naming the file, the key, what was expected and what was
found; every problem is listed at once.

Reading TOML needs ``tomllib`` (Python 3.11+) or the ``tomli`` package on Python 3.10.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.cli._common import subparsers
from advisor.cli._options import environment
from advisor.core.errors import ConfigError

# options whose built-in default an environment variable replaces: the variable wins over the table
# (--storage is every storage command's; the study options declare their own in TuneOptions)
ENVIRONMENT = {"storage": ("ADVISOR_STORAGE",), **environment()}
COMMANDS_KEY = "commands"  # [tool.advisor.commands.NAME]: one command's own defaults
_TABLE = re.compile(r"^\s*\[\s*tool\s*\.\s*advisor\s*[\].]", re.MULTILINE)


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest pyproject.toml in ``start`` (default: the working directory) or above."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _toml() -> Any:
    """tomllib (Python 3.11+), else tomli when installed, else None."""
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    else:  # Python 3.10
        try:
            import tomli

            return tomli
        except ImportError:
            return None


def read_table(path: Path) -> dict[str, Any] | None:
    """The ``[tool.advisor]`` table of ``path`` (None when it has none)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it for its [tool.advisor] table ({exc})") from None
    if not _TABLE.search(text):
        return None  # not ours to judge: a broken file without our table is left alone
    toml = _toml()
    if toml is None:
        raise ConfigError(f"{path}: the [tool.advisor] table needs Python 3.11 or later (tomllib), or the tomli "
                          "package on Python 3.10: pip install tomli")
    try:
        data = toml.loads(text)
    except toml.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}); it holds the [tool.advisor] table") from None
    table = data.get("tool", {}).get("advisor")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: tool.advisor must be a table ([tool.advisor]), found {_kind(table)}")
    return table


class BadValue(Exception):
    """A table value an option cannot take: the message says what was expected and found."""


@dataclass(frozen=True)
class Setting:
    """One table entry, checked: the option it sets and its value for that option's dest."""

    key: str  # as written ("max-metric-drop", "no-confirm")
    action: argparse.Action
    value: Any


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "a whole number", float: "a number", str: "a string", list: "a list",
            dict: "a table"}.get(type(value), type(value).__name__)


def _options(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.Action, bool]]:
    """A command's table keys: long option name -> (action, negated), for options the table can set."""
    keys = {}
    for action in parser._actions:
        if (isinstance(action, (argparse._HelpAction, argparse._VersionAction)) or not action.option_strings
                or action.required):  # a required option is given on the command line every time
            continue
        for text in action.option_strings:
            if text.startswith("--"):
                negated = isinstance(action, argparse.BooleanOptionalAction) and text.startswith("--no-")
                keys[text[2:]] = (action, negated)
    return keys


def _convert(action: argparse.Action, negated: bool, value: Any) -> Any:
    """The value for ``action``'s dest; BadValue with 'expected ..., found ...' otherwise."""
    if action.nargs == 0:  # a flag
        if not isinstance(value, bool):
            raise BadValue(f"expected true or false, found {value!r} ({_kind(value)})")
        if isinstance(action, argparse._StoreFalseAction):
            return not value
        return (not value) if negated else value
    if isinstance(action, argparse._AppendAction):
        if not isinstance(value, list):
            raise BadValue(f"expected a list of strings such as [\"compile\"], found {value!r} ({_kind(value)})")
        return [_one(action, v) for v in value]
    return _one(action, value)


def _one(action: argparse.Action, value: Any) -> Any:
    kind = action.type
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadValue(f"expected a whole number, found {value!r} ({_kind(value)})")
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadValue(f"expected a number, found {value!r} ({_kind(value)})")
        value = float(value)
    elif kind is None:
        if not isinstance(value, str):
            raise BadValue(f"expected a string, found {value!r} ({_kind(value)})")
    else:  # a parsing function, as on the command line: its text, or a number written as one
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise BadValue(f"expected a string such as {action.metavar or 'the command line takes'}, "
                             f"found {value!r} ({_kind(value)})")
        try:
            value = kind(str(value))  # type: ignore[misc,operator]
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
            raise BadValue(str(exc)) from None
    if action.choices is not None and value not in action.choices:
        raise BadValue(f"expected one of {', '.join(map(str, action.choices))}, found {value!r}")
    return value


def check_table(path: Path, table: dict[str, Any], root: argparse.ArgumentParser) -> dict[str, list[Setting]]:
    """Every entry of the table checked against the commands' options: the settings for
    each command (shared keys first, then its own table's). Raises ConfigError listing
    every unknown key and every value of the wrong type."""
    commands = {name: _options(p) for name, p in subparsers(root).items()}
    # an option's older, deprecated name is still read, but neither listed nor suggested
    shown = {name: [k for k, (action, _) in keys.items() if action.help != argparse.SUPPRESS]
             for name, keys in commands.items()}
    every = sorted({key for keys in shown.values() for key in keys})
    problems: list[str] = []
    settings: dict[str, dict[str, Setting]] = {name: {} for name in commands}

    def check(where: str, key: str, value: Any, names: Sequence[str]) -> None:
        having = [n for n in names if key in commands[n]]
        if not having:
            known = sorted({k for n in names for k in shown[n]})
            near = difflib.get_close_matches(key.replace("_", "-"), known, n=1)
            hint = f"did you mean {near[0]}?" if near else f"expected one of {', '.join(known)}"
            problems.append(f"{where} {key}: unknown key ({hint})")
            return
        for name in having:
            action, negated = commands[name][key]
            try:
                converted = _convert(action, negated, value)
                if action.dest == "storage":
                    converted = anchor_storage(converted, path.parent)
                settings[name][action.dest] = Setting(key, action, converted)
            except BadValue as exc:
                problems.append(f"{where} {key}: {exc} (advisor {name} --{key})")
                return

    own = table.get(COMMANDS_KEY, {})
    for key, value in table.items():
        if key != COMMANDS_KEY:
            check("[tool.advisor]", key, value, list(commands))
    if not isinstance(own, dict):
        problems.append(f"[tool.advisor] {COMMANDS_KEY}: expected tables such as [tool.advisor.commands.report], "
                        f"found {own!r} ({_kind(own)})")
        own = {}
    for name, value in own.items():  # a command's own table, after the shared keys: it wins
        where = f"[tool.advisor.{COMMANDS_KEY}.{name}]"
        if name not in commands:
            near = difflib.get_close_matches(name, list(commands), n=1)
            problems.append(f"{where}: unknown command (" + (f"did you mean {near[0]}?)" if near else
                                                             f"expected one of {', '.join(commands)})"))
        elif not isinstance(value, dict):
            problems.append(f"{where}: expected a table of options, found {value!r} ({_kind(value)})")
        else:
            for key, sub_value in value.items():
                check(where, key, sub_value, [name])
    if problems:
        raise ConfigError(f"{path}: [tool.advisor] is invalid:\n" + "\n".join(f"  - {p}" for p in problems)
                          + f"\n  (keys are the long options of the advisor commands: {', '.join(every)})")
    return {name: list(s.values()) for name, s in settings.items()}


def anchor_storage(url: str, folder: Path) -> str:
    """A SQLite or journal file named relative to the pyproject.toml's folder: the same
    study database whichever folder of the project advisor runs in."""
    for prefix in ("sqlite:///", "journal:"):
        if url.startswith(prefix):
            rest = url[len(prefix):]
            if rest and not rest.startswith("/") and not rest.startswith(":memory:"):
                return prefix + str(folder / rest)
    return url


def _given(root: argparse.ArgumentParser, sub: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The dests given on the command line (parsed again with every default suppressed)."""
    saved = [(a, a.default) for a in sub._actions]
    try:
        for action, _ in saved:
            action.default = argparse.SUPPRESS
        return set(vars(root.parse_args(argv))) - {"command"}
    finally:
        for action, default in saved:
            action.default = default


def apply_project_defaults(root: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str],
                           start: Path | None = None) -> tuple[Path | None, list[Setting]]:
    """Set ``args``' options the command line left out from the project's [tool.advisor]
    table (not those an environment variable sets). Returns the file and what was set."""
    path = find_pyproject(start)
    table = read_table(path) if path is not None else None
    if path is None or not table:
        return path, []
    settings = check_table(path, table, root).get(args.command, [])
    if not settings:
        return path, []
    sub = subparsers(root)[args.command]
    given = _given(root, sub, argv)
    exclusive = {a.dest: {b.dest for b in g._group_actions} for g in sub._mutually_exclusive_groups
                 for a in g._group_actions}
    applied = []
    for s in settings:
        dest = s.action.dest
        if dest in given or exclusive.get(dest, set()) & given:
            continue  # the command line wins (over an alias of the same option too)
        if any(os.environ.get(variable) for variable in ENVIRONMENT.get(dest, ())):
            continue  # so does the environment
        setattr(args, dest, s.value)
        applied.append(s)
    return path, applied
