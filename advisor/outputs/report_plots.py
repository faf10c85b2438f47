"""The PNG plots of `advisor report`, drawn with matplotlib's Agg canvas (no pyplot, no GUI).

matplotlib is imported inside the functions: it is an optional dependency (``advisor[report]``).
The files carry no date or software version, so the same study gives the same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from advisor.core.errors import StudyError
from advisor.core.objectives import Limits
from advisor.core.stored import MAX_METRIC_DROP, StoredStudy, TrialRecord
from advisor.core.units import fmt_bytes
from advisor.outputs.summary import KnobEffect

MiB = 2**20
PNG_METADATA = {"Software": None}  # drops matplotlib's version; Agg writes no creation time
FILES = ("pareto.png", "metric.png", "knobs.png")
ENERGY = "energy.png"  # only when trials measured their energy (a GPU with NVML)
LATENCY = "latency.png"  # only for an inference study's trials (their per-request latency)


def require_matplotlib() -> None:
    """Raise StudyError (before anything is written) when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise StudyError("advisor report needs matplotlib: pip install 'advisor[report]'") from None


def write_plots(out: Path, study: StoredStudy, trials: list[TrialRecord], base: TrialRecord,
                effects: list[KnobEffect], energy: bool = False, latency: bool = False) -> tuple[str, ...]:
    """Write FILES into ``out``: ``trials`` (completed, duplicates left out) against the
    baseline; ENERGY with ``energy`` (``has_energy``: the baseline and other trials
    measured their energy per sample); LATENCY with ``latency`` (``has_latency``: an
    inference study's p99 latency, with --max-latency-ms). Returns the names written."""
    import matplotlib
    import matplotlib.style

    front = {r.number for r in study.front()}
    measured = [r for r in trials if r.figures is not None]
    points = [{"n": r.number, "x": study.shown_throughput(r), "mem": r.figures.peak_memory_bytes / MiB,
               "acc": _shown(study, r.figures.score), "feasible": r.feasible, "front": r.number in front}
              for r in measured]
    assert base.figures is not None
    cap, drop = study.attrs.get("memory_cap_bytes"), study.attrs.get(MAX_METRIC_DROP)
    # the default style, not the user's matplotlibrc: the same study always gives the same images
    with matplotlib.style.context("default"), matplotlib.rc_context({"svg.hashsalt": "advisor", "figure.dpi": 100}):
        _scatter(out / "pareto.png", points, base.number, "mem", "peak memory (MiB)",
                 "Throughput vs peak memory", (cap / MiB, f"memory cap ({fmt_bytes(cap)})") if cap else None)
        metric = study.metric
        allowed = Limits(drop, None, bool(study.attrs.get("max_drop_relative"))).allowed(base.figures.score) if drop else 0
        floor = ((_shown(study, base.figures.score - allowed), f"{metric.name} limit (baseline, "
                  f"{metric.delta_text(-allowed)})") if drop else None)
        unit = " (%)" if metric.fraction else (f" ({metric.unit})" if metric.unit else "")
        _scatter(out / "metric.png", points, base.number, "acc", metric.name + unit, f"Throughput vs {metric.name}",
                 floor)
        _knob_chart(out / "knobs.png", effects)
        written = FILES
        if energy:
            joules = [p | {"energy": 1000 * r.get("energy_per_sample_j")} for p, r in zip(points, measured)
                      if r.get("energy_per_sample_j") is not None]
            _scatter(out / ENERGY, joules, base.number, "energy", "energy (mJ per sample)",
                     "Throughput vs energy per sample", None)
            written = (*written, ENERGY)
        if latency:
            limit = study.attrs.get("max_latency_ms")
            tails = [p | {"p99": r.latency.p99_ms} for p, r in zip(points, measured) if r.latency is not None]
            _scatter(out / LATENCY, tails, base.number, "p99", "p99 latency at the trial's batch size (ms)",
                     "Throughput vs p99 latency (single forward calls)",
                     (float(limit), f"--max-latency-ms {limit:g}") if limit else None)
            written = (*written, LATENCY)
    return written


def has_energy(base: TrialRecord, trials: list[TrialRecord]) -> bool:
    """Whether the baseline and at least one other trial measured their energy per sample."""
    return base.get("energy_per_sample_j") is not None and sum(
        r.get("energy_per_sample_j") is not None and r.figures is not None for r in trials) > 1


def has_latency(base: TrialRecord) -> bool:
    """Whether the study measured per-request latency (an inference study's baseline did)."""
    return base.latency is not None


def _figure(width: float, height: float) -> Any:
    """A Figure on an Agg canvas of its own: no pyplot, no global backend switch."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _scatter(path: Path, points: list[dict[str, Any]], base_number: int, key: str, ylabel: str, title: str,
             line: tuple[float, str] | None) -> None:
    fig = _figure(7.5, 5)
    ax = fig.subplots()
    groups = (("other feasible trials", lambda p: p["feasible"] and not p["front"], {"marker": "o", "color": "#9ab"}),
              ("infeasible trials", lambda p: not p["feasible"], {"marker": "x", "color": "#888", "s": 45}),
              ("Pareto front (feasible)", lambda p: p["front"],
               {"marker": "o", "color": "#e6550d", "edgecolors": "black", "s": 60, "zorder": 3}))
    for label, keep, style in groups:
        chosen = [p for p in points if keep(p)]
        if chosen:
            ax.scatter([p["x"] for p in chosen], [p[key] for p in chosen], label=label, **style)
    for p in points:
        if p["front"] and p["n"] != base_number:
            ax.annotate(str(p["n"]), (p["x"], p[key]), xytext=(5, 5), textcoords="offset points", fontsize=8)
    b = next(p for p in points if p["n"] == base_number)
    ax.scatter([b["x"]], [b[key]], marker="*", s=260, color="gold", edgecolors="black", zorder=4,
               label=f"baseline (trial {base_number})")
    ax.annotate(f"baseline ({base_number})", (b["x"], b[key]), xytext=(8, -14), textcoords="offset points", fontsize=8)
    if line is not None:
        ax.axhline(line[0], linestyle="--", color="#777", linewidth=1, label=line[1])
    ax.set_xlabel("throughput (samples/s)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata=PNG_METADATA)


def _knob_chart(path: Path, effects: list[KnobEffect]) -> None:
    shown = [e for e in effects if e.throughput_ratio is not None]
    ratios = [e.throughput_ratio for e in effects if e.throughput_ratio is not None]
    positions, y, previous = [], 0.0, None
    for e in shown:
        y += 0.6 if previous is not None and e.knob != previous else 0.0  # a gap between knobs
        positions.append(y)
        y, previous = y + 1, e.knob
    fig = _figure(7.5, 1.6 + 0.3 * max(y, 1))
    ax = fig.subplots()
    if not shown:
        ax.text(0.5, 0.5, "no knob varied among the completed trials", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
    else:
        knobs = list(dict.fromkeys(e.knob for e in shown))
        colors = ["#3182bd" if knobs.index(e.knob) % 2 == 0 else "#9ecae1" for e in shown]
        ax.barh(positions, [r - 1 for r in ratios], left=1.0, color=colors, height=0.8)
        ax.set_yticks(positions, [f"{e.label} (n={e.n})" for e in shown], fontsize=8)
        ax.invert_yaxis()
        ax.axvline(1.0, color="black", linewidth=1)
        for pos, r in zip(positions, ratios, strict=True):
            ax.text(r, pos, f" {r:.2f}x ", va="center", ha="left" if r >= 1 else "right", fontsize=7)
        lo, hi = min(ratios + [1.0]), max(ratios + [1.0])
        ax.set_xlim(lo - 0.15 * (hi - lo) - 0.05, hi + 0.15 * (hi - lo) + 0.05)
        ax.set_xlabel("median throughput / baseline (x)")
        ax.grid(axis="x", alpha=0.3)
    ax.set_title("Each knob's effect: median throughput of the completed trials\n"
                 "with that value, relative to the baseline", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata=PNG_METADATA)


def _shown(study: StoredStudy, score: float) -> float:
    """A score as the plot shows it: the metric itself (a fraction in %)."""
    value = study.metric.shown(score)
    return 100 * value if study.metric.fraction else value
