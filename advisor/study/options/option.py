"""``Option``: what a study option says about itself, once, beside its ``TuneOptions``
field (``advisor.study.options.tune_options``): its command-line flag and help, how a value typed or
passed becomes the field's, the environment variable the command falls back to, and the
study attribute a resumed study must match. ``advisor tune``'s flags (``advisor.cli``),
``advisor.tune()``'s keywords (``advisor.api``) and ``MUST_MATCH``
(``advisor.study.run.plan``) are read from these declarations, and the errors name an option
in the caller's terms: ``ON_CLI`` ("--trials") or ``IN_PYTHON`` ("trials=")."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

KEY = "option"  # the dataclasses.field metadata key


@dataclass(frozen=True)
class Option:
    """One option of a study, declared in a field's metadata (``option(...)``)."""

    flag: str | None = None  # "--trials"; None: not an option of its own (the field is set another way)
    help: str | None = None  # argparse's help text ("%%" for "%"), shown unchanged by `advisor tune --help`
    parse: Callable[[str], Any] | None = None  # text -> value, ValueError with the reason (the argparse type)
    read: Callable[[Any, str], Any] | None = None  # the value given -> the field's, naming the option (a StudyError)
    into: tuple[str, ...] = ()  # the fields a tuple value fills (the drop: amount and relative)
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    negatable: bool = False  # a switch: --confirm / --no-confirm
    repeat: bool = False  # the flag may be given several times (argparse's append); ``read`` joins the values
    env: str | None = None  # the command falls back to this variable when the flag is not given
    # the variable's text and name -> value (a StudyError naming the variable)
    env_read: Callable[[str, str], Any] | None = None
    older_env: tuple[str, ...] = ()  # the variable's older names, still read after ``env``
    # older flags (deprecated): still read, exclusive with this one, hidden from --help and
    # completion; their names underscored are advisor.tune()'s older keywords
    aliases: tuple[str, ...] = ()
    must_match: str | None = None  # the study attribute that holds it; a resumed study must match it

    @property
    def name(self) -> str:
        """The command line's dest and ``advisor.tune()``'s keyword: the flag, underscored."""
        if self.flag is None:
            raise ValueError("an option without a flag has no name of its own")
        return self.dests[0]

    @property
    def flags(self) -> tuple[str, ...]:
        """The flag and its older names (their values go to the same field)."""
        return tuple(f for f in (self.flag, *self.aliases) if f)

    @property
    def envs(self) -> tuple[str, ...]:
        """The environment variable and its older names, in the order they are read."""
        return (self.env, *self.older_env) if self.env else ()

    @property
    def dests(self) -> tuple[str, ...]:
        """Where argparse puts the flag's and its older names' values."""
        return tuple(f.removeprefix("--").replace("-", "_") for f in self.flags)


def option(default: Any = dataclasses.MISSING, **declared: Any) -> Any:
    """A dataclass field that declares its option: ``trials: int = option(20, flag=...)``."""
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata={KEY: Option(**declared)})
    return dataclasses.field(default=default, metadata={KEY: Option(**declared)})


def declared(cls: type) -> Iterator[tuple[dataclasses.Field[Any], Option]]:
    """Every field of ``cls`` with its Option, in declaration order (the help's order).
    A field without one is a TypeError: every field must say how it is set."""
    for f in dataclasses.fields(cls):
        if KEY not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name} declares no Option (advisor.study.options.option)")
        yield f, f.metadata[KEY]


def options_of(cls: type) -> dict[str, Option]:
    """Field name -> its Option, for the fields that are options of their own (have a flag)."""
    return {f.name: o for f, o in declared(cls) if o.flag is not None}


def older_names(cls: type) -> dict[str, str]:
    """An older flag underscored (``accuracy``) -> the field it sets: ``advisor.tune()``'s
    older keywords, still taken (deprecated)."""
    return {dest: field for field, o in options_of(cls).items() for dest in o.dests[1:]}


Naming = Callable[[str], str]  # a field's name -> the option as a caller writes it


def naming(cls: type, python: bool) -> Naming:
    """How a caller names ``cls``' options: "--trials" on the command line, "trials=" in Python."""
    found = options_of(cls)

    def name(field: str) -> str:
        o = found[field]
        return f"{o.name}=" if python else str(o.flag)

    return name


def build(cls: type, values: Mapping[str, Any], name: Naming, **fixed: Any) -> Any:
    """``cls`` from the options' values as given (keyed by field; a field left out takes its
    default): each option's ``read`` first, a tuple value spread over its ``into`` fields."""
    fields: dict[str, Any] = dict(fixed)
    for field, o in options_of(cls).items():
        if field not in values:
            continue
        value = values[field]
        if o.read is not None:
            value = o.read(value, name(field))
        fields.update(zip(o.into, value) if o.into else [(field, value)])
    return cls(**fields)


def must_match(cls: type) -> tuple[tuple[str, str], ...]:
    """(field, study attribute) for every field a resumed study must match."""
    return tuple((f.name, o.must_match) for f, o in declared(cls) if o.must_match)
