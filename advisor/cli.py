"""The `advisor` command line. Heavy imports (torch, ray, optuna) happen inside commands."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

from advisor.errors import AdvisorError

EPILOGS = {
    "tune": """In an interactive terminal the live explorer shows the trials as they finish (q stops the
study gracefully); --no-tui, --json or a pipe give plain output.

examples:
  advisor tune examples/digits_cnn.py                      # 20 trials, default space, ./advisor.db
  advisor tune model.py --trials 50 --space eager --timeout 3600
  advisor tune examples/digits_cnn.py --space cpu          # + DDP/FSDP, pruning, QAT on this CPU
  advisor tune examples/digits_inference.py --workload inference
  advisor tune model.py --storage postgresql://me@db/advisor --ray-address auto
  advisor tune model.py --max-accuracy-drop 0.005 --memory-cap 2GiB --json""",
    "hardware": """examples:
  advisor hardware           # the capability table, knob by knob, with reasons
  advisor hardware --json""",
    "spaces": """examples:
  advisor spaces             # list the shipped presets
  advisor spaces default     # show one, filtered for this machine""",
    "export": """examples:
  advisor export --pick balanced -o best.yaml
  advisor export --trial 7 --format json
  advisor export --pick fastest --format python -o train_fast.py   # runnable; plain-PyTorch lines below
  advisor export --study digits_cnn-default --pick fastest -o fast.yaml""",
    "tui": """keys: v view (front / all / failed), x / y plot axes, s sort, r reverse, f filter,
      e export the selected trial, ? help, q quit

examples:
  advisor tui                                  # the study in ./advisor.db (a list when there are several)
  advisor tui --study digits_cnn-default
  advisor tui --storage sqlite:///runs.db --export-dir configs/""",
    "measure": """examples:
  advisor measure examples/digits_cnn.py --config best.yaml            # 3 fresh trials
  advisor measure model.py --config fast.yaml --repeats 5 --json""",
    "report": """examples:
  advisor report                               # ./advisor-report/report.md + PNG plots
  advisor report --study digits_cnn-cpu -o share/
  advisor report --storage sqlite:///runs.db --study digits_cnn-default""",
    "init": """examples:
  advisor init model.py      # a commented template to fill in""",
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="advisor", description="Auto-tuning optimization advisor for PyTorch.",
                                epilog="Run `advisor COMMAND --help` for a command's options and examples.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_, description=help_, epilog=EPILOGS[name],
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    t = add("tune", "Search for the configurations that make model.py fastest, smallest and accurate.")
    t.add_argument("model", help="path to a model.py that follows the contract (see README)")
    t.add_argument("--workload", default="train", choices=("train", "inference"),
                   help="train (default): time training steps, accuracy after a fixed number of samples; "
                        "inference: time forward passes of the trained model, no training")
    t.add_argument("--space", help="preset name or YAML file (default: default, or inference with --workload inference)")
    t.add_argument("--trials", type=int, default=20, help="the study's total number of measured trials (default 20)")
    t.add_argument("--storage", help="Optuna storage URL (default $ADVISOR_STORAGE or sqlite:///advisor.db)")
    t.add_argument("--study", help="study name (default: MODEL-SPACE); re-running resumes it")
    t.add_argument("--timeout", type=float, help="wall-clock budget of the whole study, seconds")
    t.add_argument("--trial-timeout", type=float,
                   help="limit for one trial, seconds (default: 10x the baseline trial, at least 120)")
    t.add_argument("--max-accuracy-drop", type=float, default=0.01,
                   help="feasible trials lose at most this much metric vs the baseline (default 0.01 = 1 point)")
    t.add_argument("--memory-cap", help="feasible trials peak below this, e.g. 2GiB or 500MiB")
    t.add_argument("--train-samples", type=int, help="samples each trial trains on before evaluation "
                   "(default: 5 epochs of the training set)")
    t.add_argument("--sampler", default="default",
                   help="default: the baseline with one knob changed first (up to 8 trials), then TPE; "
                        "or plain tpe, nsga2, random, gp")
    t.add_argument("--seed", type=int, default=0, help="seed of the sampler and of every trial (default 0)")
    t.add_argument("--ray-address", help="join this Ray cluster instead of starting a local one")
    t.add_argument("--skip-preflight", action="store_true",
                   help="do not build the model in the driver first (for models too large for it)")
    t.add_argument("--json", action="store_true", help="print the summary as JSON")
    t.add_argument("--no-tui", action="store_true",
                   help="plain progress lines even in an interactive terminal (default there: the live explorer)")

    h = add("hardware", "Show what this machine can do, knob by knob, with the reason for each refusal.")
    h.add_argument("--json", action="store_true")

    s = add("spaces", "List the shipped search spaces, or show one filtered for this machine.")
    s.add_argument("name", nargs="?", help="a preset name or YAML path to show")

    e = add("export", "Write the configuration of a chosen trial to a file.")
    e.add_argument("--storage", help="Optuna storage URL (default $ADVISOR_STORAGE or sqlite:///advisor.db)")
    e.add_argument("--study", help="study name (needed when the storage holds several)")
    which = e.add_mutually_exclusive_group()
    which.add_argument("--trial", type=int, help="trial number")
    which.add_argument("--pick", default=None, help="fastest, smallest, most-accurate or balanced (default)")
    e.add_argument("--format", default="yaml", choices=("yaml", "json", "python"),
                   help="yaml (default) or json: the config file advisor.load_config reads; python: a runnable "
                        "script that applies it with advisor.apply(), plus the plain-PyTorch equivalent")
    e.add_argument("-o", "--output", help="file to write (default: print)")
    e.add_argument("--json", action="store_true", help="print the whole export document as JSON")

    u = add("tui", "Explore a stored study: Pareto table, scatter plot, trial details; export a config.")
    u.add_argument("--storage", help="Optuna storage URL (default $ADVISOR_STORAGE or sqlite:///advisor.db)")
    u.add_argument("--study", help="study name (default: the only one, else a list to choose from)")
    u.add_argument("--export-dir", default=".", help="where `e` writes configs (default: the working directory)")

    m = add("measure", "Measure an exported config again on this machine and compare with the stored figures.")
    m.add_argument("model", help="the model.py the config is for")
    m.add_argument("--config", required=True, help="a file written by advisor export (yaml or json)")
    m.add_argument("--repeats", type=int, default=3, help="fresh trials to run, one after another (default 3)")
    m.add_argument("--trial-timeout", type=float, default=600.0, help="limit for one trial, seconds (default 600)")
    m.add_argument("--ray-address", help="join this Ray cluster instead of starting a local one")
    m.add_argument("--json", action="store_true", help="print the comparison as JSON")

    r = add("report", "Write a Markdown report of a study with PNG plots (Pareto front, each knob's effect).")
    r.add_argument("--storage", help="Optuna storage URL (default $ADVISOR_STORAGE or sqlite:///advisor.db)")
    r.add_argument("--study", help="study name (needed when the storage holds several)")
    r.add_argument("-o", "--output", default="advisor-report", help="directory to write (default ./advisor-report)")

    i = add("init", "Write a commented model.py template.")
    i.add_argument("path", nargs="?", default="model.py")
    i.add_argument("--force", action="store_true", help="overwrite an existing file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command is None:
        _parser().print_help()
        return 2
    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "tune": cmd_tune, "hardware": cmd_hardware, "spaces": cmd_spaces, "export": cmd_export, "init": cmd_init,
        "report": cmd_report, "tui": cmd_tui, "measure": cmd_measure}
    try:
        return commands[args.command](args)
    except AdvisorError as exc:
        print(f"advisor {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"advisor {args.command}: aborted", file=sys.stderr)
        return 130


def parse_size(text: str | None) -> int | None:
    """'2GiB', '500MiB', '1.5G', '123456' -> bytes."""
    from advisor.errors import StudyError

    if text is None:
        return None
    units = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "kb": 10**3, "m": 2**20, "mib": 2**20, "mb": 10**6,
             "g": 2**30, "gib": 2**30, "gb": 10**9, "t": 2**40, "tib": 2**40, "tb": 10**12}
    raw = text.strip().lower()
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    try:
        value = float(number) * units[raw[len(number):].strip()]
    except (ValueError, KeyError):
        raise StudyError(f"--memory-cap {text!r} is not a size (expected e.g. 2GiB, 500MiB or bytes)") from None
    if value <= 0:
        raise StudyError(f"--memory-cap must be positive, found {text!r}")
    return int(value)


def cmd_tune(args: argparse.Namespace) -> int:
    import optuna

    from advisor.study import TuneOptions, Tuner

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # advisor reports trials itself
    from advisor.tune_output import TuneOutput

    options = TuneOptions(
        workload_path=args.model, space=args.space, workload=args.workload, storage=args.storage, study_name=args.study,
        trials=args.trials, timeout=args.timeout, trial_timeout=args.trial_timeout,
        max_accuracy_drop=args.max_accuracy_drop, memory_cap=parse_size(args.memory_cap),
        sampler=args.sampler, seed=args.seed, train_samples=args.train_samples,
        ray_address=args.ray_address, skip_preflight=args.skip_preflight)
    live = not (args.json or args.no_tui) and sys.stdin.isatty() and sys.stdout.isatty()
    output = TuneOutput(json_mode=args.json)
    tuner = Tuner(options, on_event=output.event)
    tuner.prepare()
    output.prepared(tuner)
    study = _run_live(tuner, output) if live else tuner.run()
    return output.finish(tuner, study)


def _run_live(tuner: Any, output: Any) -> Any:
    """Run the study in a background thread with the explorer attached; when the user
    quits it early the study stops gracefully; the summary is printed afterwards."""
    import signal

    from advisor.background import BackgroundTune

    tuner.start_ray()  # here, in the main thread: the explorer replaces stdio while it runs
    output.quiet = True
    background = BackgroundTune(tuner, also=output.event)
    app = load_tui().make_app(tuner.url, tuner.study_name, live=background)

    def on_sigterm(signum: int, frame: Any) -> None:
        background.stop("interrupted by SIGTERM")
        app.exit()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        app.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if background.running:
            print("stopping: cancelling running trials and recording them ...", file=sys.stderr)
            background.stop(tuner.stop_reason or "interrupted by the user (quit from the explorer)")
    for path in app.exported:
        print(f"exported {path}")
    return background.join()


def cmd_hardware(args: argparse.Namespace) -> int:
    from advisor.hardware import capability_table, detect, fingerprint

    hw = detect()
    rows = capability_table(hw)
    if args.json:
        print(json.dumps({"fingerprint": fingerprint(hw), "notes": list(hw.notes), "options": [
            {"knob": r.key, "value": r.value, "available": r.available, "reason": r.reason,
             "workloads": r.workloads.split(", ")} for r in rows]}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
    gpus = hw.gpu_names() or "none"
    console.print(f"CPU: {hw.cpu.model}, {hw.cpu.cores} cores, flags: {' '.join(sorted(hw.cpu.flags)) or 'unknown'}")
    console.print(f"GPUs: {gpus}; driver {hw.driver_version or '-'}; torch {hw.torch_version}, CUDA {hw.cuda_version or '-'}, "
                  f"torchao {hw.torchao or 'not installed'}")
    console.print(f"Trials run on: {hw.device}")
    for note in hw.notes:
        console.print(f"note: {note}")
    table = Table("knob", "option", "for", "offered", "why not")
    for r in rows:
        for_ = "both" if r.workloads == "train, inference" else r.workloads
        table.add_row(r.key, json.dumps(r.value), for_, "yes" if r.available else "no", r.reason)
    console.print(table)
    return 0


def cmd_spaces(args: argparse.Namespace) -> int:
    import search_spaces
    from advisor.space import load_space

    if not args.name:
        for name in search_spaces.names():
            space = load_space(name)
            text = search_spaces.read(name) or ""
            first = next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#")), "")
            print(f"{name:10s} {space.size():6d} configurations  {first}")
        return 0
    from advisor.hardware import detect
    from advisor.space import filter_space

    space = load_space(args.name)
    filtered = filter_space(space, detect())
    print(f"space {space.name}: {space.size()} configurations, {filtered.size()} on this machine")
    for knob in filtered.knobs:
        cond = f"   (when {', '.join(f'{k}={json.dumps(v)}' for k, v in knob.when)})" if knob.when else ""
        print(f"  {knob.name:24s} {json.dumps(list(knob.choices))}{cond}")
    from advisor.report import dropped_lines

    for line in dropped_lines(filtered):
        print(f"  {line}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    import optuna

    from advisor import storage as st
    from advisor.config import dump_export

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from advisor.export import export_document, pick, trial_by_number

    storage = st.open_storage(st.storage_url(args.storage), must_exist=True)
    study = st.load(storage, args.study)
    trial = trial_by_number(study, args.trial) if args.trial is not None else pick(study, args.pick or "balanced")
    document = export_document(study, trial)
    text = dump_export(document, args.output, "json" if args.json else args.format)
    if args.output:
        print(f"wrote trial {trial.number} of study {study.study_name!r} to {args.output}")
        if args.format == "python" and not args.json:
            from advisor.config import TrialConfig
            from advisor.export_python import launch_command

            print(f"run it:    {launch_command(TrialConfig.from_dict(document['config']), args.output)}")
        else:
            print(f"apply it:  prepared = advisor.apply(model, advisor.load_config({args.output!r}))")
    else:
        sys.stdout.write(text)
    return 0


def load_tui() -> Any:
    """The explorer package, imported only when a command shows it (advisor/ itself never
    imports textual or tui/)."""
    import importlib

    from advisor.errors import AdvisorError

    try:
        return importlib.import_module("tui")
    except ImportError as exc:
        raise AdvisorError(f"the explorer needs textual and textual-plotext ({exc}); "
                           "reinstall advisor: pip install advisor") from None


def cmd_tui(args: argparse.Namespace) -> int:
    from pathlib import Path

    from advisor.errors import StudyError

    if not Path(args.export_dir).is_dir():
        raise StudyError(f"--export-dir {args.export_dir}: not a directory")
    app = load_tui().make_app(args.storage, args.study, export_dir=args.export_dir)
    app.run()
    for path in app.exported:
        print(f"exported {path}")
    return 0


def cmd_measure(args: argparse.Namespace) -> int:
    from rich.console import Console

    from advisor.remeasure import comparison_table, remeasure
    from advisor.report import describe_config, fmt_bytes

    console = Console(stderr=args.json, highlight=False)
    if not console.is_terminal:
        console.width = 120

    def on_run(i: int, r: Any, wall: float) -> None:
        text = (f"{r.throughput:,.0f} samples/s, {fmt_bytes(r.peak_memory_bytes)}, accuracy {r.accuracy:.4f}"
                if r.ok else f"FAILED [{r.failure_class}] {(r.failure_message or '').strip()[:200]}")
        console.print(f"run {i + 1}  {wall:5.1f} s  {text}", markup=False)

    if args.trial_timeout <= 0:
        from advisor.errors import StudyError

        raise StudyError(f"--trial-timeout must be a positive number of seconds, found {args.trial_timeout}")
    result = remeasure(args.model, args.config, args.repeats, args.ray_address, args.trial_timeout, on_run)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    source = result.document.get("source") or {}
    origin = f"trial {source.get('trial')} of study {source.get('study')!r}" if source.get("study") else "no source recorded"
    console.print(f"config    {args.config}: {origin} ({describe_config(result.config.to_dict())})", markup=False)
    for note in result.notes:
        console.print(f"note      {note}", markup=False)
    console.print(comparison_table(result))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    import optuna

    from advisor import storage as st
    from advisor.markdown_report import write_report

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = st.storage_url(args.storage)
    study = st.load(st.open_storage(url, must_exist=True), args.study)
    path = write_report(study, args.output, url)
    print(f"wrote {path} (and its plots beside it)")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from pathlib import Path

    from advisor.errors import WorkloadError
    from advisor.template import TEMPLATE

    path = Path(args.path)
    if path.exists() and not args.force:
        raise WorkloadError(f"{path} already exists (use --force to overwrite)")
    path.write_text(TEMPLATE)
    print(f"wrote {path}: fill in model() and datasets(), then run: advisor tune {path}")
    return 0


