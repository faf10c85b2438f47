"""``advisor spaces [NAME]``: the shipped presets, or one filtered for this machine."""

from __future__ import annotations

import argparse
import json
from typing import Any

NAME = "spaces"
HELP = "List the shipped search spaces, or show one filtered for this machine."
EPILOG = """examples:
  advisor spaces             # list the shipped presets
  advisor spaces default     # show one, filtered for this machine
  advisor spaces cpu --json  # ... as JSON: the knobs kept, and each option dropped with the reason"""


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("name", nargs="?", help="a preset name or YAML path to show")
    s.add_argument("--json", action="store_true",
                   help="print the presets (or the one space, filtered for this machine) as JSON")


def run(args: argparse.Namespace) -> int:
    from advisor import search_spaces
    from advisor.outputs.json_output import print_json
    from advisor.search.space import filter_space, load_space

    if not args.name:
        presets = []
        for name in search_spaces.names():
            space = load_space(name)
            text = search_spaces.read(name) or ""
            first = next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#")), "")
            presets.append({"name": name, "configurations": space.size(), "description": first,
                            "knobs": [knob.name for knob in space.knobs]})
        if args.json:
            print_json("spaces", {"presets": presets})
            return 0
        for p in presets:
            print(f"{p['name']:10s} {p['configurations']:6d} configurations  {p['description']}")
        return 0
    from advisor.machine.hardware import detect
    from advisor.outputs.summary import dropped_lines

    space = load_space(args.name)
    filtered = filter_space(space, detect())
    if args.json:
        print_json("space", {"space": space.name, "configurations": space.size(),
                             "configurations_here": filtered.size(), "knobs": [_knob(k) for k in filtered.knobs],
                             "dropped": [{"knob": d.knob, "value": d.value, "reason": d.reason,
                                          "whole_knob": d.knob not in {k.name for k in filtered.knobs}}
                                         for d in filtered.dropped]})
        return 0
    print(f"space {space.name}: {space.size()} configurations, {filtered.size()} on this machine")
    for knob in filtered.knobs:
        cond = f"   (when {', '.join(f'{k}={json.dumps(v)}' for k, v in knob.when)})" if knob.when else ""
        print(f"  {knob.name:24s} {json.dumps(list(knob.choices))}{cond}")
    for line in dropped_lines(filtered):
        print(f"  {line}")
    return 0


def _knob(knob: Any) -> dict[str, Any]:
    """A kept knob: its choices and the condition it is sampled under ({} when always)."""
    return {"name": knob.name, "choices": list(knob.choices),
            "when": {k: list(v) if isinstance(v, tuple) else v for k, v in knob.when}}
