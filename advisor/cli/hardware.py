"""``advisor hardware``: this machine, and every knob's options as offered or refused."""

from __future__ import annotations

import argparse
import json
import sys

from advisor.cli._options import add_ray_address

NAME = "hardware"
HELP = "Show what this machine can do, knob by knob, with the reason for each refusal."
EPILOG = """examples:
  advisor hardware           # the capability table, knob by knob, with reasons
  advisor hardware --json
  advisor hardware --ray-address HEAD:6379   # a cluster's nodes, and what a trial can span"""


def add_arguments(h: argparse.ArgumentParser) -> None:
    h.add_argument("--json", action="store_true")
    add_ray_address(h, "read the hardware on a node of this Ray cluster, and list its nodes")


def run(args: argparse.Namespace) -> int:
    from advisor.machine.hardware import detect, fingerprint
    from advisor.techniques.rules import capability_table

    nodes: list = []
    if args.ray_address:
        from advisor.runner.cluster import cluster_hardware, cluster_nodes

        hw = cluster_hardware(args.ray_address)
        nodes = cluster_nodes()
    else:
        hw = detect()
    rows = capability_table(hw)
    if args.json:
        from advisor.outputs.json_output import print_json

        print_json("hardware", {"fingerprint": fingerprint(hw), "notes": list(hw.notes), "nodes": nodes,
                                "trial_devices": max(hw.cluster_devices, len(hw.gpus) or hw.cpu.cores), "options": [
            {"knob": r.key, "value": r.value, "available": r.available, "reason": r.reason,
             "workloads": r.workloads.split(", ")} for r in rows]})
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
    if nodes:
        unit = "GPUs" if hw.device == "cuda" else "CPUs"
        console.print(f"Ray cluster: {len(nodes)} node(s), " + "; ".join(
            f"{n['address']} ({n['node']}): {n['CPU']} CPUs, {n['GPU']} GPUs" for n in nodes))
        console.print(f"A parallel trial can span the cluster: up to {hw.cluster_devices} ranks ({unit}); one wider than "
                      "a node gets its ranks placed on several by a Ray placement group")
    table = Table("knob", "option", "for", "offered", "why not")
    for r in rows:
        for_ = "both" if r.workloads == "train, inference" else r.workloads
        table.add_row(r.key, json.dumps(r.value), for_, "yes" if r.available else "no", r.reason)
    console.print(table)
    return 0
