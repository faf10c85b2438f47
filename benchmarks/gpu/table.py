"""README's GPU table from a GPU check's results (benchmarks/gpu/README.md).

    python benchmarks/gpu/table.py benchmarks/results/gpu/DIR [DIR ...]

Reads every ``knobs_*.json`` under the folders given and prints one Markdown row per knob:
its throughput and memory ratios to its model's fp32 baseline with the 95% interval and the
pair count, the GPU and the torch version; refused and failed knobs say why.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def ratio(found: dict | None) -> str:
    if not found:
        return "-"
    if found.get("high") is None or found["n"] < 2:
        return f"{found['center']:.2f}x (1 pair)"
    return f"{found['center']:.2f}x ({found['low']:.2f}-{found['high']:.2f}, {found['n']} pairs)"


def rows(doc: dict) -> list[str]:
    gpu = doc["torch"].get("gpu") or "no GPU"
    torch = doc["torch"]["torch"]
    out = []
    started = {r["model"] for r in doc["rows"] if r["variant"] == "baseline" and (r.get("runs") or r.get("failures"))}
    for row in doc["rows"]:
        if row["variant"] == "baseline":
            continue
        where = f"{row['model']} ({row['workload']})"
        if row.get("refused"):
            out.append(f"| {where} | {row['variant']} | refused: {row['refused'][:120]} | | {gpu} | {torch} |")
        elif row.get("throughput_ratio"):
            alone = "" if row.get("closing_baseline", True) else " †"  # paired with its round's opening baseline only
            out.append(f"| {where} | {row['variant']} | {ratio(row['throughput_ratio'])}{alone} | "
                       f"{ratio(row['memory_ratio'])} | {gpu} | {torch} |")
        elif not row.get("failures") and row["model"] not in started:
            out.append(f"| {where} | {row['variant']} | not run: the part's limit came before its model | | {gpu} | {torch} |")
        else:
            why = (row["failures"] or ["no pair: a baseline run failed"])[0].splitlines()[0][:120]
            out.append(f"| {where} | {row['variant']} | failed: {why} | | {gpu} | {torch} |")
    return out


def main(folders: list[str]) -> int:
    print("| model (workload) | knob | throughput vs fp32 | peak memory vs fp32 | GPU | torch |")
    print("|---|---|---|---|---|---|")
    for folder in folders:
        for path in sorted(Path(folder).glob("**/knobs_*.json")):
            doc = json.loads(path.read_text())
            if doc.get("tiny_models"):
                print(f"<!-- {path}: a dry run on tiny models, left out -->")
                continue
            print("\n".join(rows(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
