"""The study options are defined once, in ``TuneOptions`` (each field's ``Option``), and
everything else agrees with that definition: ``advisor tune``'s flags (name, help, type,
default), ``advisor confirm``'s confirmation flags, ``advisor.tune()``'s keywords and
their defaults, and the attributes a resumed study must match. ``disagreements`` says
where they part; the last tests show it notices a field added without a flag, a flag
without a keyword, and a must-match mark that the resume check would not see."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os

import pytest

import advisor
from advisor.cli._common import subparsers
from advisor.cli.main import parser
from advisor.study.options.option import declared, must_match, option, options_of
from advisor.study.options.tune_options import TuneOptions
from advisor.study.run import plan

# the fields that are not options of their own: model.py's path (the command's positional
# `model`, advisor.tune()'s `model` or callables), and whether the drop is a percentage
# (set by --max-metric-drop with its amount)
NOT_OPTIONS = {"workload_path", "max_drop_relative"}
# advisor.tune()'s keywords that are not study options: the model.py contract as callables,
# where to write it, and whether to print progress
PYTHON_ONLY = {"loss", "metric", "optimizer", "baseline", "name", "workdir", "progress"}
COMMAND_ONLY = {"--json", "--no-tui"}  # how `advisor tune` prints
CONFIRM_FLAGS = {"--pairs", "--confirm-target", "--confirm-top", "--log-to"}  # also `advisor confirm`'s


def _actions(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: a for a in p._actions for flag in a.option_strings if flag.startswith("--") and flag != "--help"}


def disagreements(cls: type, tune_parser: argparse.ArgumentParser, confirm_parser: argparse.ArgumentParser,
                  tune: object, resumed: tuple[str, ...]) -> list[str]:
    """Where the command line, the Python API and the resume check part from ``cls``' options."""
    try:
        fields = {f.name: (f, o) for f, o in declared(cls)}
    except TypeError as exc:
        return [str(exc)]
    problems = [f"{name}: no flag, and not one of the fields documented as no option" for name, (_, o) in
                fields.items() if o.flag is None and name not in NOT_OPTIONS]
    options = options_of(cls)
    actions, keywords = _actions(tune_parser), inspect.signature(tune).parameters  # type: ignore[arg-type]
    flags = {flag for o in options.values() for flag in o.flags}
    flags |= {f"--no-{o.name.replace('_', '-')}" for o in options.values() if o.negatable}
    problems += [f"{flag}: a flag of advisor tune that no option declares"
                 for flag in sorted(set(actions) - flags - COMMAND_ONLY)]
    for name, o in options.items():
        f = fields[name][0]
        action = actions.get(str(o.flag))
        if action is None:
            problems.append(f"{name}: advisor tune has no {o.flag}")
        elif (action.help, action.dest) != (o.help, o.name):
            problems.append(f"{name}: {o.flag}'s help or dest is not the declared one")
        elif action.default != (None if (o.env or o.aliases) else f.default):
            problems.append(f"{name}: {o.flag}'s default {action.default!r} is not {f.default!r}")
        elif o.parse in (int, float) and action.type is not o.parse:
            problems.append(f"{name}: {o.flag} does not read {o.parse.__name__}")
        if o.flag in CONFIRM_FLAGS and _actions(confirm_parser).get(o.flag, action).help != o.help:
            problems.append(f"{name}: advisor confirm's {o.flag} is not the declared one")
        keyword = keywords.get(o.name)
        if keyword is None or keyword.kind is not inspect.Parameter.KEYWORD_ONLY:
            problems.append(f"{name}: advisor.tune() has no keyword {o.name}=")
        elif keyword.default != f.default or type(keyword.default) is not type(f.default):
            problems.append(f"{name}: advisor.tune()'s {o.name}={keyword.default!r}, the option's default is "
                            f"{f.default!r}")
    named = {o.name for o in options.values()}
    problems += [f"{k}=: a keyword of advisor.tune() that no option declares" for k, p in keywords.items()
                 if p.kind is inspect.Parameter.KEYWORD_ONLY and k not in named | PYTHON_ONLY]
    marked = [attr for _, attr in must_match(cls)]
    problems += [f"{attr}: marked must_match, but the resume check does not compare it"
                 for attr in marked if attr not in resumed]
    problems += [f"{attr}: compared on resume, but neither marked must_match nor derived by the plan"
                 for attr in resumed if attr not in marked and attr not in plan.DERIVED_MUST_MATCH]
    return problems


@pytest.fixture(scope="module")
def parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    commands = subparsers(parser())
    return commands["tune"], commands["confirm"]


def test_the_command_line_the_python_api_and_the_resume_check_agree_with_the_definition(parsers):
    problems = disagreements(TuneOptions, *parsers, advisor.tune, plan.MUST_MATCH)
    assert not problems, "\n".join(problems)


def test_a_field_added_without_a_flag_or_keyword_is_noticed(parsers):
    bare = dataclasses.make_dataclass("Bare", [("new_limit", int, dataclasses.field(default=1))], bases=(TuneOptions,),
                                      frozen=True)
    assert disagreements(bare, *parsers, advisor.tune, plan.MUST_MATCH) == [
        "Bare.new_limit declares no Option (advisor.study.options.option)"]
    quiet = dataclasses.make_dataclass("Quiet", [("new_limit", int, option(1))], bases=(TuneOptions,), frozen=True)
    assert disagreements(quiet, *parsers, advisor.tune, plan.MUST_MATCH) == [
        "new_limit: no flag, and not one of the fields documented as no option"]
    flagged = dataclasses.make_dataclass("Flagged", [("new_limit", int, option(1, flag="--new-limit", parse=int,
                                                                               must_match="new_limit"))],
                                         bases=(TuneOptions,), frozen=True)
    assert disagreements(flagged, *parsers, advisor.tune, plan.MUST_MATCH) == [
        "new_limit: advisor tune has no --new-limit", "new_limit: advisor.tune() has no keyword new_limit=",
        "new_limit: marked must_match, but the resume check does not compare it"]


def test_a_keyword_or_default_that_drifts_is_noticed(parsers):
    def tune(model, datasets=None, *, trials: int = 10, surprise: int = 0, **rest): ...  # noqa: ANN001, ANN003

    problems = disagreements(TuneOptions, *parsers, tune, plan.MUST_MATCH + ("hardware",))
    assert "trials: advisor.tune()'s trials=10, the option's default is 20" in problems
    assert "surprise=: a keyword of advisor.tune() that no option declares" in problems
    assert "seed: advisor.tune() has no keyword seed=" in problems
    assert "hardware: compared on resume, but neither marked must_match nor derived by the plan" in problems


def test_errors_name_the_option_as_the_caller_wrote_it():
    options = TuneOptions(workload_path="m.py", trials=0)
    with pytest.raises(advisor.StudyError, match="^--trials must be at least 1"):
        options.check()
    with pytest.raises(advisor.StudyError, match="^trials= must be at least 1"):
        options.check(python=True)
    both = TuneOptions(workload_path="m.py", skip_preflight=True)
    with pytest.raises(advisor.StudyError, match="^train_samples= is required with skip_preflight= "):
        both.check(python=True)
    with pytest.raises(advisor.StudyError, match="^--pairs must be at least 1"):
        TuneOptions(workload_path="m.py", pairs=0).check()


def test_the_command_line_and_python_read_values_the_same_way(monkeypatch):
    for variable in ("ADVISOR_CONFIRM", "ADVISOR_METRIC_SEEDS", "ADVISOR_TIMING_TOLERANCE"):  # conftest sets them
        monkeypatch.delenv(variable, raising=False)
    args = subparsers(parser())["tune"].parse_args(["m.py", "--max-metric-drop", "2%", "--memory-cap", "2GiB"])
    from advisor.cli._options import tune_options

    from_cli = tune_options(args)
    from_python = TuneOptions.given("m.py", {"max_metric_drop": "2%", "memory_cap": "2GiB"}, python=True)
    assert from_cli == from_python == TuneOptions(workload_path="m.py", max_metric_drop=0.02,
                                                  max_drop_relative=True, memory_cap=2 * 2**30)
    monkeypatch.setenv("ADVISOR_CONFIRM", "off")
    monkeypatch.setenv("ADVISOR_METRIC_SEEDS", "1")
    assert (tune_options(args).confirm, tune_options(args).metric_seeds) == (False, 1)  # the command only
    assert (from_python.confirm, from_python.metric_seeds) == (True, 3)
    monkeypatch.setenv("ADVISOR_TIMING_TOLERANCE", "0.2")
    assert (tune_options(args).timing_tolerance, from_python.timing_tolerance) == (0.2, None)
    monkeypatch.setenv("ADVISOR_TIMING_TOLERANCE", "rough")
    with pytest.raises(advisor.StudyError, match=r"\$ADVISOR_TIMING_TOLERANCE is 'rough', expected a fraction"):
        tune_options(args)
    monkeypatch.setenv("ADVISOR_TIMING_TOLERANCE", "2")
    with pytest.raises(advisor.StudyError, match="--timing-tolerance must be a fraction between 0 and 1"):
        tune_options(args).check()
    monkeypatch.delenv("ADVISOR_TIMING_TOLERANCE")
    monkeypatch.setenv("ADVISOR_METRIC_SEEDS", "many")
    with pytest.raises(advisor.StudyError, match=r"\$ADVISOR_METRIC_SEEDS is 'many', expected a whole number"):
        tune_options(args)
    monkeypatch.delenv("ADVISOR_METRIC_SEEDS")
    monkeypatch.setenv("ADVISOR_ACCURACY_SEEDS", "2")  # the variable's older name, still read
    assert tune_options(args).metric_seeds == 2
    monkeypatch.setenv("ADVISOR_ACCURACY_SEEDS", "few")
    with pytest.raises(advisor.StudyError, match=r"\$ADVISOR_ACCURACY_SEEDS is 'few'"):
        tune_options(args)


def test_older_names_still_work_hidden_and_said_deprecated(monkeypatch, capsys):
    """--max-accuracy-drop, --accuracy-seeds and --accuracy (advisor.tune()'s max_accuracy_drop=,
    accuracy_seeds=, accuracy=) set the same options as their metric-named successors; --help
    and the completion scripts show only the new names; using an old one says so."""
    from advisor.api.tune import OLDER, _older
    from advisor.cli._options import tune_options
    from advisor.cli.completion import bash_script

    monkeypatch.delenv("ADVISOR_METRIC_SEEDS", raising=False)
    tune = subparsers(parser())["tune"]
    old = tune_options(tune.parse_args(["m.py", "--max-accuracy-drop", "2%", "--accuracy-seeds", "5",
                                        "--accuracy", "all"]))
    new = tune_options(tune.parse_args(["m.py", "--max-metric-drop", "2%", "--metric-seeds", "5", "--train", "all"]))
    assert old == new and (new.max_metric_drop, new.metric_seeds, new.train, new.two_stage) == (0.02, 5, "all", False)
    err = capsys.readouterr().err
    for older, newer in (("--max-accuracy-drop", "--max-metric-drop"), ("--accuracy-seeds", "--metric-seeds"),
                         ("--accuracy", "--train")):
        assert f"advisor: {older} is deprecated: it is {newer} now" in err
    shown, script = tune.format_help(), bash_script(parser())
    for older in ("--max-accuracy-drop", "--accuracy-seeds", "--accuracy "):
        assert older not in shown and older not in script
    assert "--train {selective,all}" in shown and "--metric-seeds" in shown and "--metric-seeds" in script
    with pytest.raises(SystemExit):  # still exclusive with the new name
        tune.parse_args(["m.py", "--train", "all", "--accuracy", "all"])
    assert OLDER == {"max_accuracy_drop": "max_metric_drop", "accuracy_seeds": "metric_seeds", "accuracy": "train"}
    given = {"max_metric_drop": 0.01, "metric_seeds": 3, "train": "selective"}  # advisor.tune()'s defaults
    with pytest.warns(DeprecationWarning) as caught:
        assert _older({"accuracy": "all", "accuracy_seeds": 1}, given) == {"train": "all", "metric_seeds": 1}
    assert [str(w.message) for w in caught] == ["advisor.tune(accuracy=...) is deprecated: it is train= now",
                                                "advisor.tune(accuracy_seeds=...) is deprecated: it is metric_seeds= now"]
    with pytest.raises(TypeError, match="got accuracy= and train="):
        _older({"accuracy": "all"}, given | {"train": "all"})
    with pytest.raises(TypeError, match="unexpected keyword argument 'acuracy'"):
        _older({"acuracy": "all"}, given)
    with pytest.warns(DeprecationWarning), pytest.raises(advisor.StudyError, match="^train= must be one of"):
        advisor.tune("m.py", accuracy="some")  # the older keyword reaches the option, checked before anything runs


@pytest.mark.parametrize("argv", [
    [],
    ["--train-samples", "256", "--budget", "90s", "--max-metric-drop", "1%", "--memory-cap", "2GiB", "--no-confirm",
     "--seed", "3", "--space", "cpu", "--timing-tolerance", "0.1", "--metric-seeds", "5", "--train", "all"],
    ["--workload", "inference", "--max-latency-ms", "2.5", "--max-metric-drop", "0.02", "--pairs", "4",
     "--confirm-top", "2", "--sampler", "tpe", "--skip-preflight", "--ignore-doctor"],
])
def test_the_resume_line_gives_back_every_option_that_was_set(argv, monkeypatch):
    """`advisor tune`'s resume hint is the command again: parsed, its flags make the same
    options, so the study's must-match checks and its trials' settings agree."""
    from advisor.cli._options import tune_options
    from advisor.cli.main import parser

    for name in [n for n in os.environ if n.startswith("ADVISOR_")]:
        monkeypatch.delenv(name)
    first = tune_options(parser().parse_args(["tune", "m.py", "--trials", "7", "--study", "s", *argv]))
    again = tune_options(parser().parse_args(["tune", "m.py", "--trials", "7", "--study", "s",
                                              *first.resume_flags()]))
    assert again == first
    if first.budget == 90:
        assert first.resume_flags()[:4] == ["--space", "cpu", "--budget", "90s"]  # as people type it


def test_a_budget_is_given_back_as_people_type_it():
    from advisor.core.units import duration_flag, parse_duration

    assert [duration_flag(s) for s in (1800, 5400, 90, 7200, 60, 61)] == ["30m", "1h30m", "90s", "2h", "1m", "61s"]
    assert all(parse_duration(duration_flag(s)) == s for s in (1800, 5400, 90, 7200, 60, 61, 0.5, 10860))
