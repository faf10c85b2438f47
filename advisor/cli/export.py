"""``advisor export``: write the configuration of a chosen trial (a config file, a
runnable Python script, or the settings in transformers', accelerate's or torchrun's
terms)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from advisor.cli._common import add_storage_arguments, open_stored_study

NAME = "export"
HELP = "Write the configuration of a chosen trial to a file."
EPILOG = """examples:
  advisor export --pick balanced -o best.yaml
  advisor export --trial 7 --format json
  advisor export --pick fastest --format python -o train_fast.py   # runnable; plain-PyTorch lines below
  advisor export --study digits_cnn-default --pick fastest -o fast.yaml
  advisor export --format hf -o training_args.py      # TrainingArguments for transformers' Trainer
  advisor export --format hf --json                    # the same as JSON, with the not_covered list
  advisor export --format accelerate -o accelerate.yaml # accelerate launch --config_file accelerate.yaml train.py
  advisor export --format torchrun -o launch.sh        # sh launch.sh train.py: environment + torchrun line"""


_RUN = {"hf": ("use it:  ", "from {stem} import trainer; t, prepared = trainer(model, train_set); t.train()"),
        "accelerate": ("run it:  ", "accelerate launch --config_file {path} {script}"),
        "torchrun": ("run it:  ", "sh {path} {script}   ({script}: advisor export --format python writes one)")}


def add_arguments(e: argparse.ArgumentParser) -> None:
    add_storage_arguments(e, "study name (needed when the storage holds several)")
    which = e.add_mutually_exclusive_group()
    which.add_argument("--trial", type=int, help="trial number")
    which.add_argument("--pick", default=None, help="fastest, smallest, best-metric or balanced (default)")
    e.add_argument("--format", default=None, choices=("yaml", "json", "python", "hf", "accelerate", "torchrun"),
                   help="yaml or json: the config file advisor.load_config reads (default: the one -o's name "
                        "says, .json or .yaml; .py: python, .sh: torchrun; else yaml); python: a runnable "
                        "script that applies it with advisor.apply(), plus the plain-PyTorch equivalent; hf: "
                        "transformers TrainingArguments keywords (a Python module; with --json, JSON); accelerate: "
                        "the config YAML accelerate launch reads; torchrun: a shell script with the environment and "
                        "the torchrun line. Each of the last three lists what has no equivalent there")
    e.add_argument("-o", "--output", help="file to write (default: print)")
    e.add_argument("--json", action="store_true", help="print the whole export document as JSON (with --format "
                   "hf, accelerate or torchrun: with that format's section, its not_covered list included)")


def _say_what_it_is(study: Any, record: Any, how: str | None) -> None:
    """The exported trial's figures against the baseline (intervals, unconfirmed, the
    metric's verdict) and, for a pick, why it is the pick when another reads better: what a
    user acting on the file should know (the report and the dashboard said it; export did not)."""
    from advisor.core.picks import tie_note
    from advisor.core.units import first_line

    if record.baseline:
        print("measured:  the baseline itself (every ratio is to it)")
    elif (said := study.versus_baseline(record).summary(study.metric)):
        print(f"measured:  {said}")
    if how is not None and (tie := tie_note(study, how, record)):
        print(f"why:       the {how} pick: {first_line(tie, 400)}")


def run(args: argparse.Namespace) -> int:
    from advisor.core.picks import pick
    from advisor.outputs.export import export_document, output_format, trial_by_number, with_target, write_export

    study, _ = open_stored_study(args)
    record = trial_by_number(study, args.trial) if args.trial is not None else pick(study, args.pick or "balanced")
    if args.json:  # JSON whatever --format says (its section included): the name must allow JSON
        chosen, fmt = args.format or "yaml", output_format(args.output, "json", "--json")
    else:  # refuses a format the file's name contradicts
        chosen = fmt = output_format(args.output, args.format)
    document = with_target(export_document(study, record), chosen)  # refuses what that tool cannot take
    if args.json:  # the whole document, tagged like every --json output (advisor.load_config reads it too)
        from advisor.outputs.json_output import json_document

        document = json_document("export", document)
    text = write_export(document, args.output, fmt)
    if record.figures is not None and not record.feasible:  # chosen by --trial: a pick never is
        from advisor.outputs.console import infeasible_text

        why = infeasible_text(record.constraints, study.versus_baseline(record), study.metric, record.latency)
        why = "" if why == "infeasible" else ": " + why.removeprefix("infeasible: ")
        print(f"note: trial {record.number} is infeasible in study {study.name!r}{why}; it is not on the feasible "
              "front, and is exported as measured", file=sys.stderr)
    if not args.output:
        sys.stdout.write(text)
        return 0
    print(f"wrote trial {record.number} of study {study.name!r} to {args.output}")
    _say_what_it_is(study, record, None if args.trial is not None else (args.pick or "balanced"))
    if fmt in _RUN:
        from advisor.outputs.launch_export import script_name

        print(f"{_RUN[fmt][0]}  " + _RUN[fmt][1].format(path=shlex.quote(args.output), stem=Path(args.output).stem,
                                                          script=script_name(document)))
    elif fmt == "python":
        from advisor.outputs.python_script import launch_command

        assert record.config is not None
        run = "python " + shlex.quote(args.output) if "lightning" in document else launch_command(record.config,
                                                                                                  args.output)
        print(f"run it:    {run}")
    else:
        print(f"apply it:  prepared = advisor.apply(model, advisor.load_config({args.output!r}))")
    return 0


