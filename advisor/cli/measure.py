"""``advisor measure model.py --config best.yaml``: an exported config measured again on
this machine, as a paired ratio against the baseline run beside it, plus one full run for
the metric; printed beside the stored figures."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from advisor.cli._options import add_ray_address
from advisor.core.errors import StudyError

NAME = "measure"
HELP = "Measure an exported config again on this machine, in pairs against its baseline, and compare."
EPILOG = """Rounds run the baseline (the export's, or model.py's BASELINE for older exports), the
config, the baseline again (every round with runs of its own), each in a fresh process
(timing and peak memory): 5 pairs, then as many as their spread asks for the ratio's 95%
interval to be within --confirm-target (said at once when that is more than --pairs);
then one full run of the config gives its metric.

examples:
  advisor measure examples/digits_cnn.py --config best.yaml
  advisor measure model.py --config fast.yaml --pairs 12 --json"""


def add_arguments(m: argparse.ArgumentParser) -> None:
    from advisor.core.pairs import DEFAULT_MAX_PAIRS, DEFAULT_TARGET

    m.add_argument("model", help="the model.py the config is for")
    m.add_argument("--config", required=True, help="a file written by advisor export (yaml or json)")
    m.add_argument("--pairs", type=int, default=None,
                   help=f"at most this many pairs against the baseline (default {DEFAULT_MAX_PAIRS})")
    m.add_argument("--repeats", type=int, default=None, help="the same as --pairs (its old name)")
    m.add_argument("--confirm-target", type=float, default=DEFAULT_TARGET,
                   help=f"stop once the 95%% interval is within this relative half-width (default {DEFAULT_TARGET})")
    m.add_argument("--no-metric", action="store_true", help="skip the full run that measures the metric")
    m.add_argument("--no-accuracy", action="store_true", help=argparse.SUPPRESS)  # --no-metric's older name
    m.add_argument("--trial-timeout", type=float, default=600.0, help="limit for one run, seconds (default 600)")
    add_ray_address(m, "join this Ray cluster instead of starting a local one")
    m.add_argument("--json", action="store_true", help="print the comparison as JSON")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from advisor.core.events import Note
    from advisor.core.pairs import DEFAULT_MAX_PAIRS
    from advisor.outputs.remeasure import comparison_table, describe_run, remeasure

    console = Console(stderr=args.json, highlight=False)
    if not console.is_terminal:
        console.width = 120
    if args.pairs is not None and args.repeats is not None and args.pairs != args.repeats:
        raise StudyError(f"--pairs {args.pairs} and --repeats {args.repeats} disagree (--repeats is --pairs' old name)")
    pairs = args.pairs if args.pairs is not None else args.repeats if args.repeats is not None else DEFAULT_MAX_PAIRS
    if args.no_accuracy:
        print("advisor: --no-accuracy is deprecated: it is --no-metric now (the older name still works)",
              file=sys.stderr)
    if args.trial_timeout <= 0:
        raise StudyError(f"--trial-timeout must be a positive number of seconds, found {args.trial_timeout}")

    def on_pair(c: Any, wall: float) -> None:
        text = c.throughput.text() if c.throughput is not None else c.note
        console.print(f"pair {len(c.pairs):>2}  {wall:5.1f} s  throughput {text}", markup=False)

    def on_event(event: Any) -> None:
        if isinstance(event, Note):
            console.print(f"note      {event.text}", markup=False)

    result = remeasure(args.model, args.config, pairs, args.confirm_target, args.ray_address, args.trial_timeout,
                       not (args.no_metric or args.no_accuracy), on_pair, on_event)
    if result.full_run is not None:
        r = result.full_run
        console.print("full run  " + (describe_run(r, result.metric) if r.ok else f"FAILED [{r.failure_class}] {r.failure_message}"),
                      markup=False)
    if args.json:
        from advisor.outputs.json_output import print_json

        print_json("measure", result.to_dict())
        return 0
    source = result.document.get("source") or {}
    origin = f"trial {source.get('trial')} of study {source.get('study')!r}" if source.get("study") else "no source recorded"
    console.print(f"config    {args.config}: {origin} ({result.config.describe()})", markup=False)
    console.print(f"baseline  {result.baseline.describe()}", markup=False)
    console.print(comparison_table(result))
    noisy = result.too_noisy()
    if noisy:
        console.print(f"note      {noisy}", markup=False)
    return 0
