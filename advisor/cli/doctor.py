"""``advisor doctor [model.py]``: every knob option this machine offers, run alone on a
tiny built-in model (and on model.py), each in a fresh trial process: works or fails, and
its speed and memory as ratios to the reference run. What failed is stored for this
machine's hardware fingerprint and dropped from the next ``advisor tune``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from advisor.core.errors import StudyError

if TYPE_CHECKING:
    from advisor.core.results import TrialResult
    from advisor.study.doctor.checkup import Outcome

NAME = "doctor"
HELP = ("Run every knob option this machine offers, alone, on a tiny built-in model (and model.py): "
        "which work, which fail and why; advisor tune then leaves out what failed.")
EPILOG = """Each option runs in a fresh trial process, as advisor tune's trials do, beside the reference
(fp32 on the built-in model, BASELINE on model.py). The options that fail are stored for this
machine (its hardware fingerprint: CPU, GPUs, driver, torch) in $ADVISOR_HOME/doctor/ (default
~/.cache/advisor/doctor/), and advisor tune drops them with the reason; --ignore-doctor keeps them.

examples:
  advisor doctor                        # every option on the built-in model (under 2 minutes on 2 CPU cores)
  advisor doctor model.py               # ... and on model.py, a few probed steps each
  advisor doctor --knob compile --knob quantization
  advisor doctor --json > doctor.json   # for a bug report"""


def add_arguments(d: argparse.ArgumentParser) -> None:
    from advisor.study.doctor.checkup import TRIAL_TIMEOUT

    d.add_argument("model", nargs="?", help="also run the options on this model.py (a few probed steps each)")
    d.add_argument("--knob", action="append", metavar="KNOB",
                   help="only this knob's options (repeatable; default: every knob)")
    d.add_argument("--trial-timeout", type=float, default=TRIAL_TIMEOUT,
                   help=f"limit for one option's run, seconds (default {TRIAL_TIMEOUT:.0f}); a run that "
                        "takes longer is reported as timed out, not as failed")
    d.add_argument("--timing-tolerance", type=float, metavar="FRACTION",
                   help="time each run's steps until their median is known to +-this fraction (default 0.05, "
                        "or $ADVISOR_TIMING_TOLERANCE); 0.2 for a quicker, rougher check")
    d.add_argument("--no-save", action="store_true", help="store nothing: advisor tune is not affected")
    d.add_argument("--json", action="store_true", help="print the findings as JSON (for bug reports)")


def _probed(serving: bool) -> str:
    return "a few timed forward passes (frozen for serving: inference only)" if serving else "a few probed steps"


def run(args: argparse.Namespace) -> int:
    import tempfile

    from advisor.cli._options import flag_or_env
    from advisor.core.config import unknown_knob_hint
    from advisor.core.settle import TOLERANCE
    from advisor.machine.doctor_store import save_verdicts, store_path
    from advisor.machine.hardware import describe_fingerprint, detect, fingerprint
    from advisor.outputs.json_output import print_json
    from advisor.study.doctor.checkup import builtin_subject, run_doctor, user_subject
    from advisor.study.doctor.offered import plan_options
    from advisor.study.options.tune_options import check_tolerance
    from advisor.techniques.registry import TECHNIQUES
    from advisor.workload.contract import load_workload

    started = time.perf_counter()
    unknown = [k for k in args.knob or [] if k not in TECHNIQUES]
    if unknown:
        raise StudyError(f"--knob {unknown[0]!r}: unknown knob ({unknown_knob_hint(unknown[0], TECHNIQUES)})")
    if not args.trial_timeout > 0:
        raise StudyError(f"--trial-timeout must be a positive number of seconds, found {args.trial_timeout}")
    given, where = flag_or_env(args, "timing_tolerance")  # as advisor tune reads it; default 0.05
    tolerance = TOLERANCE if given is None else check_tolerance(given, where)
    user = load_workload(args.model) if args.model else None  # model.py's errors: exit status 2, nothing run
    hw = detect()
    user_part = user_subject(user, hw, tolerance) if user is not None else None
    fp = fingerprint(hw)
    say = (lambda text: None) if args.json else (lambda text: print(text, flush=True))
    with tempfile.TemporaryDirectory(prefix="advisor-doctor-") as directory:
        subjects = [builtin_subject(directory, hw, tolerance)] + ([user_part] if user_part is not None else [])
        options = [plan_options(hw, s.base, s.facts, args.knob, s.serving) for s in subjects]
        say(f"hardware  {describe_fingerprint(fp)}; trials run on {hw.device}")
        for s, opts in zip(subjects, options):
            ran = sum(o.config is not None for o in opts)
            say(f"doctor    {ran} option(s) to run on {_name(s.label)} "
                f"({'a short training run and evaluation' if s.sha256 is None else _probed(s.serving)} each, "
                f"beside its reference: {_describe(s.base.to_dict())})")
        # each run as it ends: on stdout, or with --json on stderr (stdout holds the JSON alone)
        outcomes = run_doctor(hw, subjects, options, args.trial_timeout,
                              lambda *run: _progress(*run, stream=sys.stderr if args.json else sys.stdout))
    verdicts = [v for o in outcomes for v in o.verdicts()]
    stored = str(save_verdicts(fp, verdicts)) if verdicts and not args.no_save else None
    wall = time.perf_counter() - started
    interrupted = any(o.interrupted for o in outcomes)
    if args.json:
        print_json("doctor", {"hardware": fp, "device": hw.device, "store": str(store_path(fp)), "saved": bool(stored),
                              "trial_timeout_s": args.trial_timeout, "timing_tolerance": tolerance,
                              "wall_s": round(wall, 1),
                              "interrupted": interrupted, "models": [o.to_dict() for o in outcomes]})
    else:
        _print_tables(outcomes, stored, wall)
    problems = [o.problem for o in outcomes if o.problem]
    for problem in problems:
        print(f"advisor doctor: error: {problem}", file=sys.stderr)
    if interrupted:  # what ran is above (and stored); the options not run say so
        ran = sum(r.result is not None for o in outcomes for r in o.rows)
        print(f"advisor doctor: interrupted after {ran} of {sum(len(o.rows) for o in outcomes)} option(s)",
              file=sys.stderr)
        return 130
    return 1 if problems else 0


def _name(label: str) -> str:
    from advisor.machine.doctor_store import BUILTIN

    return "the built-in tiny model" if label == BUILTIN else label


def _describe(changed: dict[str, Any]) -> str:
    shown = {k: v for k, v in changed.items() if k in ("batch_size", "precision") or v != _default(k)}
    return " ".join(f"{k}={json.dumps(v)}" for k, v in shown.items())


def _default(key: str) -> Any:
    from advisor.core.config import TrialConfig

    return getattr(TrialConfig(), key)


def _progress(model: str, label: str, result: TrialResult, wall: float, stream: Any = None) -> None:
    from advisor.core.units import first_line, fmt_bytes, fmt_rate

    what = "model.py" if model != "built-in" else "built-in"
    if result.ok:
        figures = f"{fmt_rate(result.throughput)} samples/s, {fmt_bytes(result.peak_memory_bytes)}"
    else:
        figures = f"{result.failure_class}: {first_line(result.failure_message, 120)}"
    print(f"run       {what:<9} {label:<44} {wall:5.1f} s  {figures}", file=stream or sys.stdout, flush=True)


def _print_tables(outcomes: list[Outcome], stored: str | None, wall: float) -> None:
    from rich.console import Console
    from rich.table import Table

    from advisor.study.doctor.offered import changes

    console = Console(width=None if sys.stdout.isatty() else 160)
    failed = 0
    for outcome in outcomes:
        s = outcome.subject
        table = Table("option", "for", "run with", "result", "speed", "memory", "error / note",
                      title=f"{_name(s.label)}: each option alone, against {_describe(s.base.to_dict())}",
                      title_justify="left")
        for row in outcome.rows:
            extra = {k: v for k, v in changes(row.option.config, s.base).items() if k != row.option.knob}
            speed = "-" if row.throughput_ratio is None else f"{row.throughput_ratio:.2f}x"
            memory = "-" if row.memory_ratio is None else f"{row.memory_ratio:.2f}x"
            table.add_row(row.option.label, row.option.workload, _describe(extra) if extra else "", row.status,
                          f"({speed})" if row.disturbed else speed, memory,
                          "; ".join(t for t in (row.error, row.note, row.disturbed) if t))
            failed += row.status == "fails"
        console.print(table)
    console.print("speed and memory: the option's throughput and peak memory over the reference's (the median of its "
                  "runs before, halfway through and after the options); one short run each, so read differences of "
                  "tens of percent as noise; (in brackets): the machine was busy during that run (the noise sentinel)")
    if stored:
        console.print(f"stored:   {stored}" + (f" (advisor tune drops the {failed} option(s) that failed; "
                                                  "--ignore-doctor keeps them)" if failed else ""))
    console.print(f"time:     {wall:.1f} s")
