"""`advisor report`: a study as a Markdown file with PNG plots, to read or share.

It writes ``report.md`` (setup, counts, the Pareto front, the recommended picks with
their export commands, each knob's effect, the failures) and three plots beside it:
``pareto.png`` (throughput vs peak memory), ``metric.png`` (throughput vs the metric)
and ``knobs.png`` (each knob value's median throughput vs the baseline); on a GPU whose
energy counter was read, ``energy.png`` too (throughput vs energy per sample); for an
inference study, ``latency.png`` (throughput vs p99 latency) and latency columns. matplotlib is
an optional dependency (``advisor[report]``), imported only when a report is written.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path
from typing import Any

from advisor.core.caveats import legend, mark
from advisor.core.errors import StudyError
from advisor.core.latency import fmt_ms
from advisor.core.pairs import SITTINGS_NOTE, resident_note
from advisor.core.picks import PICKS, pick, tie_note
from advisor.core.stored import DISTURBED_BASELINE_NOTE, MAX_METRIC_DROP, StoredStudy, TrialRecord
from advisor.core.units import fmt_bytes, fmt_rate, fmt_ratio
from advisor.outputs import report_plots as plots
from advisor.outputs.summary import KnobEffect, counts, failures_text, front_rows, knob_effects
from advisor.study.storage.stores import DEFAULT_STORAGE


def write_report(study: StoredStudy, out_dir: str | os.PathLike[str], storage_url: str | None = None) -> Path:
    """Write ``out_dir/report.md`` and its plots (``pareto.png``, ``metric.png``, ``knobs.png``).

    The directory is created when missing. Every file is written under a temporary name
    and renamed when all are done, so a failure leaves no half-written report.

    Args:
        study: the study to describe; it needs a completed baseline trial.
        out_dir: the directory to write into.
        storage_url: where the study is stored, for the export commands the report
            prints (left out when it is the default storage).

    Returns:
        The path of ``report.md``.

    Raises:
        StudyError: matplotlib is not installed, the study has no completed baseline, or
            ``out_dir`` is a file or cannot be created.

    Example:
        >>> from advisor.core.stored import read_study
        >>> from advisor.study.storage import stores as storage
        >>> study = read_study(storage.load(storage.open_storage("sqlite:///advisor.db"), "digits_cnn-cpu"))
        >>> write_report(study, "advisor-report")  # doctest: +SKIP
        PosixPath('advisor-report/report.md')
    """
    plots.require_matplotlib()
    base = study.baseline
    if base is None:
        raise StudyError(f"study {study.name!r} has no completed trial yet to report on "
                         "(its baseline trial has not completed)")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise StudyError(f"report output {out} is a file, expected a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StudyError(f"report output {out} cannot be created: {exc.strerror or exc}") from None
    trials = [r for r in study.records if r.state == "complete"]
    effects = knob_effects(study, trials)
    energy, latency = plots.has_energy(base, trials), plots.has_latency(base)
    text = _markdown(study, base, effects, storage_url, energy)
    try:
        with tempfile.TemporaryDirectory(prefix=".report-", dir=out) as tmp:
            written = plots.write_plots(Path(tmp), study, trials, base, effects, energy, latency)
            (Path(tmp) / "report.md").write_text(text, encoding="utf-8")
            for name in (*written, "report.md"):  # report.md last: it is there only when all are
                os.replace(Path(tmp) / name, out / name)
    except OSError as exc:
        raise StudyError(f"cannot write the report into {out}: {exc}") from None
    return out / "report.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _latency_cells(r: TrialRecord) -> str:
    """' p50 / p95 / p99 | batch 1 |' of an inference trial ('-' where not measured)."""
    lat = r.latency
    if lat is None:
        return " - | - |"
    return f" {fmt_ms(lat.p50_ms)} / {fmt_ms(lat.p95_ms)} / {fmt_ms(lat.p99_ms)}{lat.mark} | {fmt_ms(lat.batch1_ms)} |"


def _markdown(study: StoredStudy, base: TrialRecord, effects: list[KnobEffect],
              storage_url: str | None = None, energy: bool = False) -> str:
    u, hw = study.attrs, study.attrs.get("hardware", {})
    c = counts(study)
    latency = plots.has_latency(base)  # an inference study's per-request latency
    gpus = ", ".join(g.get("name", "?") for g in hw.get("gpus", [])) or "none"
    cap = u.get("memory_cap_bytes")
    drop, metric = u.get(MAX_METRIC_DROP), study.metric
    drop_text = "-" if drop is None else (f"{100 * drop:g}% of the baseline's" if u.get("max_drop_relative")
                                          else metric.delta_text(metric.sign * drop).lstrip("+"))
    failed = ", ".join(f"{k} {v}" for k, v in sorted(c["failed_by_class"].items()))
    lines = [
        f"# Study {study.name}: advisor report", "",
        "## Setup", "",
        f"- Workload: `{u.get('workload_path', '?')}` ({u.get('workload', 'train')})",
        f"- Search space: {u.get('space_name', '?')}",
        f"- Hardware: {hw.get('cpu_model', '?')}, {hw.get('cpu_cores', '?')} CPU cores; GPUs: {gpus}",
        (f"- Software: torch {hw.get('torch_version', '?')}, torchao {hw.get('torchao_version') or '-'}, "
         f"CUDA {hw.get('cuda_version') or '-'}, Python {hw.get('python_version', '?')}"),
        f"- Metric: {metric.name} ({metric.direction_word})",
        (f"- Max metric drop: {drop_text} vs the baseline; "
         f"memory cap: {fmt_bytes(cap) if cap else 'none'}"
         + (f"; max p99 latency: {limit:g} ms" if (limit := u.get("max_latency_ms")) else "")), "",
        "## Trials", "",
        (f"- Trials run: {c['trials']} (completed {c['completed']}"
         + (f", probed only {c['probed_only']}" if c.get("probed_only") else "")
         + f", failed {c['failed']}{f': {failed}' if failed else ''})"),
        f"- Infeasible (completed, but over the metric drop or the memory cap"
        f"{' or the latency limit' if u.get('max_latency_ms') else ''}): {c['infeasible']}",
        (f"- Duplicates (answered from an earlier trial): {c['duplicates']}; "
         f"skipped without running: {c['skipped']}"), "",
        "## Pareto front", "",
        ("Feasible trials that no other feasible trial beats on all three objectives; "
         "ratios and Δ are to the baseline. A confirmed ratio is the median of paired runs against the baseline "
         "with its 95% interval and the number of pairs; an unconfirmed one is a single trial against the "
         "baseline as measured by then (the median of its latest measurements before the trial)."
         + (f" {SITTINGS_NOTE}." if len(study.sittings) > 1 else "")
         + (f" {note}." if (note := resident_note(study.confirmations.values())) else "")), "",
        f"| trial | configuration | samples/s | vs base | peak memory | vs base | {metric.name} | Δ {metric.name} |"
        + (" p50 / p95 / p99 latency | batch 1 |" if latency else ""),
        "|---:|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if latency else ""),
    ]
    kinds: set[str] = set()
    # a disturbed first run shows the reference its ratios are to, as tune's table does (a review read
    # 25,052 here beside tune's 30,239)
    reference = study.shown_baseline_reference
    for row in front_rows(study):
        r, f, vs = row.record, row.figures, row.versus
        label = f"{r.number}{' (baseline)' if r.baseline else ''}{'' if row.on_front else ', not on the front'}"
        caveats = study.shown_caveats(r)
        kinds.update(c.kind for c in caveats)  # a busy machine, an unsettled timing
        rate = fmt_rate(study.shown_throughput(r))  # type: ignore[arg-type]
        lines.append(f"| {label} | `{_cell(r.description)}` | {rate}{mark(caveats)} | "
                     f"{vs.throughput_text()} | {fmt_bytes(f.peak_memory_bytes)} | "
                     f"{vs.memory_text()} | {metric.value_text(f.score)} | {vs.metric_text(metric)} |"
                     + (_latency_cells(r) if latency else ""))
    if (key := legend(kinds)):
        lines += ["", key + "."]
    if reference is not None:
        lines += ["", f"{DISTURBED_BASELINE_NOTE}."]
    lines += ["", "## Recommended", "", *_picks(study, storage_url), "",
              "## Plots", "",
              ("The front is over all three objectives, so in a two-objective view some front trials "
               "look beaten by others."), "",
              "![Throughput vs peak memory; Pareto front highlighted](pareto.png)", "",
              f"![Throughput vs {metric.name}; Pareto front highlighted](metric.png)", "",
              *(["![Throughput vs energy per sample (a GPU's energy counter over the timed steps)](energy.png)", ""]
                if energy else []),
              *([f"![Throughput vs p99 latency at each trial's batch size (single forward calls)]({plots.LATENCY})",
                 ""] if latency else []),
              "## Each knob's effect", "",
              ("For each value of every knob that varied: medians over the completed trials (feasible or not) "
               "that had that value, relative to the baseline. These are marginal medians over the trials the "
               "search happened to run, not controlled one-knob experiments: a value tried only together with "
               "other changes carries their effect too."), ""]
    if effects:
        lines += [f"| knob=value | median samples/s vs base | median peak memory vs base | median Δ {metric.name} | trials |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| `{_cell(e.label)}` | {fmt_ratio(e.throughput_ratio)} | {fmt_ratio(e.memory_ratio)} | "
                  f"{'-' if e.metric_delta is None else metric.delta_text(e.metric_delta)} | {e.n} |"
                  for e in effects]
        lines += ["", "![Median throughput vs the baseline per knob value](knobs.png)"]
    else:
        lines.append("No knob varied among the completed trials.")
    fails = failures_text(study)
    lines += ["", "## Failed trials", ""] + (["```text", *fails, "```"] if fails else ["None."])
    return "\n".join(lines) + "\n"


def _picks(study: StoredStudy, storage_url: str | None = None) -> list[str]:
    try:
        chosen = [(how, pick(study, how)) for how in PICKS]
    except StudyError as exc:
        return [f"Nothing to recommend: {exc}."]
    lines = []
    where = "" if storage_url in (None, DEFAULT_STORAGE) else f" --storage {shlex.quote(storage_url)}"
    for how, r in chosen:
        _, mem, acc = r.figures  # type: ignore[misc]
        thr = study.shown_throughput(r)  # a disturbed baseline: the reference its ratios are to
        vs = study.versus_baseline(r)
        command = f"advisor export{where} --study {shlex.quote(study.name)} --trial {r.number} -o {how}.yaml"
        lines.append(f"- **{how}**: trial {r.number} `{r.description}`: "
                     f"{fmt_rate(thr)} samples/s ({vs.throughput_text()}), {fmt_bytes(mem)} "
                     f"({vs.memory_text()}), {study.metric.name} {study.metric.value_text(acc)} "
                     f"({vs.metric_text(study.metric)}); "
                     + (f"{tie}; " if (tie := tie_note(study, how, r)) else "") +
                     f"export it: `{command}`")
    return lines


def report_data(study: StoredStudy, path: Path, storage_url: str | None = None) -> dict[str, Any]:
    """What ``advisor report --json`` prints: the files written and the report's figures
    as data (the front, the picks, each knob's effect, the counts). Metric values are the
    metric itself (``metric_value``, ``metric_delta``); the front rows keep ``score``,
    the score the study compares (higher is better), as ``advisor tune --json`` does."""
    base = study.baseline
    assert base is not None  # write_report refused a study without one
    metric = study.metric
    try:
        picks: dict[str, Any] = {how: pick(study, how).number for how in PICKS}
        nothing = None
    except StudyError as exc:
        picks, nothing = {}, str(exc)
    completed = [r for r in study.records if r.state == "complete"]
    effects = knob_effects(study, completed)
    names = ((*plots.FILES, plots.ENERGY) if plots.has_energy(base, completed) else plots.FILES) + (
        (plots.LATENCY,) if plots.has_latency(base) else ())
    front = []
    for row in front_rows(study):
        entry = row.to_dict()
        entry["description"] = row.record.description
        entry["metric_value"] = metric.shown(row.figures.score)
        front.append(entry)
    return {
        "study": study.name,
        "storage": storage_url,
        "report": str(path),
        "plots": [str(path.with_name(name)) for name in names],
        "workload": study.attrs.get("workload_path"),
        "space": study.attrs.get("space_name"),
        "metric": metric.to_dict(),
        "counts": counts(study),
        "front": front,
        "picks": picks,
        "nothing_to_recommend": nothing,
        "knob_effects": [{"knob": e.knob, "value": e.value, "trials": e.n, "throughput_ratio": e.throughput_ratio,
                          "memory_ratio": e.memory_ratio,
                          "metric_delta": None if e.metric_delta is None else metric.sign * e.metric_delta + 0.0}
                         for e in effects],
        "failures": failures_text(study),
    }
