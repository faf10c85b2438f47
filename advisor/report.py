"""Text presentation of a study: the Pareto table, failure counts, number formats."""

from __future__ import annotations

import json

from collections import Counter
from typing import TYPE_CHECKING, Any

from advisor import storage as st

if TYPE_CHECKING:
    import optuna


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def dropped_lines(space: Any) -> list[str]:
    """What the capability filter dropped, one line per option (one per knob when the
    whole knob was removed)."""
    kept = {k.name for k in space.knobs}
    lines, said = [], set()
    for d in space.dropped:
        if d.knob in kept:
            lines.append(f"dropped {d.knob}={json.dumps(d.value)}: {d.reason}")
        elif d.knob not in said:
            said.add(d.knob)
            lines.append(f"dropped {d.knob} (the whole knob; its default is kept): {d.reason}")
    return lines


def describe_config(config: dict[str, Any]) -> str:
    """A short one-line description: only what differs from the plain setup.

    Example:
        >>> describe_config({"batch_size": 64, "parallelism": "ddp", "devices": 2, "pruning": "l1_unstructured"})
        'bs=64 fp32 ddp x2 l1_unstructured:0.5'
    """
    from advisor.config import TrialConfig

    default = TrialConfig().to_dict()
    config = {**default, **config}
    parts = [f"bs={config['batch_size']}", str(config["precision"])]
    folded = {"batch_size", "precision", "devices", "prune_amount", "compile_mode", "parallelism", "pruning"}
    if config["parallelism"] != "single":
        parts.append(f"{config['parallelism']} x{config['devices']}")
    if config["pruning"] != "none":
        amount = "" if config["pruning"] == "semi_structured_2_4" else f":{config['prune_amount']:g}"
        parts.append(f"{config['pruning']}{amount}")
    for key, value in config.items():
        if key in folded or value == default.get(key):
            continue
        parts.append(key if value is True else f"{key}={value}")
    if config["compile"] and config["compile_mode"] != "default":
        parts.append(f"compile_mode={config['compile_mode']}")
    return " ".join(parts)


def front_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """The baseline and the feasible Pareto front, each with ratios to the baseline."""
    base = st.baseline_trial(study)
    front = st.pareto_front(study)
    on_front = {t.number for t in front}
    trials = front + ([base] if base is not None and base.number not in on_front else [])
    rows = []
    for t in sorted(trials, key=lambda t: t.number):
        thr, mem, acc = t.values
        row = {"trial": t.number, "baseline": bool(t.user_attrs.get("baseline")),
               "on_front": t.number in on_front,
               "config": t.user_attrs.get("config", {}), "throughput": thr, "peak_memory_bytes": mem,
               "accuracy": acc, "throughput_iqr_rel": _rel_iqr(t)}
        if base is not None:
            b = base.values
            row.update(throughput_ratio=thr / b[0] if b[0] else None, memory_ratio=mem / b[1] if b[1] else None,
                       accuracy_delta=acc - b[2])
        rows.append(row)
    return rows


def _rel_iqr(t: optuna.trial.FrozenTrial) -> float | None:
    med, iqr = t.user_attrs.get("step_time_median_s"), t.user_attrs.get("step_time_iqr_s")
    return iqr / med if med and iqr is not None else None


def counts(study: optuna.Study) -> dict[str, Any]:
    trials = study.get_trials(deepcopy=False)
    ran = [t for t in trials if st.measured(t)]
    failed = Counter(t.user_attrs.get("failure_class", "unknown") for t in ran if t.state.name == "FAIL")
    return {"trials": len(ran), "completed": sum(1 for t in ran if t.state.name == "COMPLETE"),
            "failed": sum(failed.values()), "failed_by_class": dict(failed),
            "duplicates": sum(1 for t in trials if "duplicate_of" in t.user_attrs),
            "skipped": sum(1 for t in trials if t.user_attrs.get("skipped")),
            "skipped_oom": sum(1 for t in trials if t.user_attrs.get("skipped")
                               and t.user_attrs.get("failure_class") == "oom"),
            "infeasible": sum(1 for t in ran if t.state.name == "COMPLETE" and any(v > 0 for v in t.constraints.values()))}


def front_table(study: optuna.Study) -> Any:
    """A rich Table of the Pareto front (baseline row first, marked)."""
    from rich.table import Table

    table = Table(title=f"Pareto front of {study.study_name} (feasible trials)", title_justify="left",
                  caption="· marks the baseline when it is not itself on the front; ratios are to the baseline",
                  caption_justify="left")
    for name, justify in (("trial", "right"), ("configuration", "left"), ("samples/s", "right"),
                          ("vs base", "right"), ("peak memory", "right"), ("vs base", "right"),
                          ("accuracy", "right"), ("Δ acc", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in front_rows(study):
        label = f"{r['trial']}{' (baseline)' if r['baseline'] else ''}{'' if r['on_front'] else ' ·'}"
        table.add_row(
            label, describe_config(r["config"]), fmt_rate(r["throughput"]), fmt_ratio(r.get("throughput_ratio")),
            fmt_bytes(r["peak_memory_bytes"]), fmt_ratio(r.get("memory_ratio")), f"{r['accuracy']:.4f}",
            fmt_delta_pt(r.get("accuracy_delta")))
    return table


def describe_hardware(fingerprint: dict[str, Any]) -> str:
    """A stored hardware fingerprint in one line: 'AMD EPYC (2 cores), no GPU, torch 2.13.0+cpu'."""
    hw = fingerprint
    gpus = ", ".join(g.get("name", "?") for g in hw.get("gpus") or []) or "no GPU"
    return f"{hw.get('cpu_model', '?')} ({hw.get('cpu_cores', '?')} cores), {gpus}, torch {hw.get('torch_version', '?')}"


def fmt_ratio(ratio: float | None) -> str:
    """1.7634 -> '1.76x' (a ratio to the baseline)."""
    return "-" if ratio is None else f"{ratio:.2f}x"


def fmt_delta_pt(delta: float | None) -> str:
    """-0.0056 -> '-0.6 pt' (an accuracy difference in percentage points)."""
    return "-" if delta is None else f"{100 * delta:+.1f} pt"


def failures_text(study: optuna.Study) -> list[str]:
    lines = []
    for t in study.get_trials(deepcopy=False):
        if t.state.name == "FAIL" and st.measured(t):
            msg = (t.user_attrs.get("failure_message") or "").strip().splitlines()
            lines.append(f"trial {t.number} [{t.user_attrs.get('failure_class', '?')}] "
                         f"{describe_config(t.user_attrs.get('config', {}))}: {msg[0] if msg else ''}")
    return lines
