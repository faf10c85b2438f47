"""What advisor writes into optuna-dashboard's notes (Markdown, shown on the study's page and
on each trial's): the figures a user acts on, as plain text, built from a stored study.

- the study's note: what was measured (the workload, the training samples, the device) on
  which hardware, the metric and its limits, the baseline, the counts, the picks with their
  export commands and the Pareto front;
- a trial's note (completed or probed only): its figures and its ratios to the baseline,
  confirmed in pairs with their 95% intervals and pair count or marked unconfirmed, the
  confirmation's status, its metric's verdict (feasible / undecided / infeasible with the
  bounds), whether it is on the front or picked, why it is infeasible.

Every ratio, interval and verdict is the text ``advisor report`` and the console print
(``Versus`` and ``Verdict``, from ``StoredStudy.versus_baseline``): one ratio per trial
everywhere. advisor's text sits between two Markdown comments (link reference
definitions, which no Markdown renderer shows): ``merge`` replaces only that block, so a
note the user wrote in the dashboard around it is kept. Nothing here imports Optuna or
optuna-dashboard (``advisor.outputs.dashboard`` writes the notes).
"""

from __future__ import annotations

import shlex

from advisor.core.caveats import legend, mark
from advisor.core.errors import StudyError
from advisor.core.pairs import resident_note
from advisor.core.picks import PICKS, pick, tie_note
from advisor.core.stored import DISTURBED_BASELINE_NOTE, MAX_METRIC_DROP, TRAINING_SKIPPED, StoredStudy, TrialRecord
from advisor.core.units import first_line, fmt_bytes, fmt_rate
from advisor.outputs.console import infeasible_text
from advisor.outputs.summary import counts, front_rows
from advisor.study.storage.stores import DEFAULT_STORAGE

BEGIN = "[//]: # (advisor: begin. advisor rewrites this block from the stored study; write your own notes outside it)"
END = "[//]: # (advisor: end)"
STATUS = {"running": "pairing not finished: more pairs were due when it stopped",
          "confirmed": "confirmed: both intervals within the target",
          "capped": "the pair cap came first: the intervals are wider than the target",
          "wide": "the sittings disagree: the pooled intervals are wider than the target",
          "settled": "settled: the intervals decide the picks; more pairs would only narrow them",
          "dominated": "stopped early", "failed": "a paired run failed"}


def merge(existing: str, block: str) -> str:
    """``existing`` (a note as stored) with advisor's block replaced by ``block`` (added
    first when the note has none); the user's text around it is kept."""
    wrapped = f"{BEGIN}\n\n{block.strip()}\n\n{END}"
    start = existing.find(BEGIN)
    end = existing.find(END, start) if start >= 0 else -1
    if start >= 0 and end >= 0:
        return existing[:start] + wrapped + existing[end + len(END):]
    rest = existing.strip()
    return wrapped + (f"\n\n{rest}" if rest else "") + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{text}`" if text else "(none)"


def picks_by_trial(study: StoredStudy) -> dict[int, list[str]]:
    """The picks (fastest, smallest, ...) each trial is, by trial number (none without a front)."""
    out: dict[int, list[str]] = {}
    try:
        for how in PICKS:
            out.setdefault(pick(study, how).number, []).append(how)
    except StudyError:
        return {}
    return out


def trial_note(study: StoredStudy, record: TrialRecord, on_front: set[int], picks: dict[int, list[str]]) -> str | None:
    """The note of a completed, probed-only or duplicate trial (None for the others)."""
    if record.state == "duplicate":
        return f"**advisor**: the same configuration as trial {record.duplicate_of}; its note has the figures."
    measured = record.probe
    if record.state not in ("complete", "probed") or measured is None:
        return None
    metric, base = study.metric, study.baseline
    vs = study.versus_baseline(record)
    if record.baseline:
        title = f"#### advisor: trial {record.number}, the baseline (every ratio in this study is to it)"
    else:
        where = f"the baseline (trial {base.number})" if base is not None else "the baseline (none completed yet)"
        title = f"#### advisor: trial {record.number} against {where}"
    tags = []
    if record.number in on_front:
        tags.append("on the Pareto front")
    elif record.state == "complete" and record.feasible and not record.baseline:
        tags.append("not on the Pareto front (another feasible trial beats it on all three objectives)")
    if picks.get(record.number):
        tags.append("picked: **" + "**, **".join(picks[record.number]) + "**")
    if record.state == "complete" and not record.feasible:
        tags.append(infeasible_text(record.constraints, vs, metric, record.latency))
    if record.state == "probed":
        why = first_line(record.get(TRAINING_SKIPPED), 500)
        tags.append(f"probed only (speed and memory, no {metric.name}): {why}")
    lines = [title, ""]
    if tags:
        lines += ["; ".join(tags), ""]
    lines += [f"| | trial {record.number} | vs the baseline |", "|---|---:|---:|",
              f"| throughput | {fmt_rate(study.shown_throughput(record))} samples/s | {_cell(vs.throughput_text())} |",
              f"| peak memory | {fmt_bytes(measured[1])} | {_cell(vs.memory_text())} |"]
    if record.figures is not None:
        lines.append(f"| {metric.name} | {metric.value_text(record.figures.score)} | "
                     f"{_cell(vs.metric_text(metric))} |")
    lines.append("")
    if vs.confirmed:
        c = study.confirmations[record.number]
        status = STATUS.get(c.status, c.status) + (f" ({first_line(c.note, 300)})" if c.note else "")
        lines.append(f"- **ratios**: confirmed in pairs against the baseline, medians with 95% intervals over "
                     f"{vs.pairs} pair{'s' if vs.pairs != 1 else ''}; {status}")
    elif not record.baseline and vs.throughput_ratio is not None:
        lines.append("- **ratios**: unconfirmed: one trial against the baseline as measured by then "
                     "(`advisor confirm` measures the front in pairs)")
    verdict = vs.verdict.text(metric.delta_text, metric.higher_is_better) if vs.verdict is not None else None
    if verdict is not None and not record.baseline and not any(verdict in tag for tag in tags):
        lines.append(f"- **{metric.name}**: {verdict}")  # (an infeasible trial's tag has it already)
    if record.baseline and study.metric_noise is not None:
        noise = study.metric_noise
        lines.append(f"- **{metric.name}**: the mean over seeds {', '.join(map(str, noise.seeds))}; "
                     f"its noise {metric.noise_text(noise.epsilon)}")
    lines += [f"- **speed**: {_cell(c.text)}" for c in record.caveats]
    lines.append(f"- **configuration**: {_code(record.description)}")
    return "\n".join(lines)


def study_note(study: StoredStudy, storage_url: str | None = None) -> str:
    """The study's note: what was measured on which hardware, the baseline, the counts,
    the picks and the front."""
    a, metric, base = study.attrs, study.metric, study.baseline
    hw, settings = a.get("hardware") or {}, a.get("settings") or {}
    gpus = ", ".join(str(g.get("name", "?")) for g in hw.get("gpus") or []) or "none"
    drop, cap = a.get(MAX_METRIC_DROP), a.get("memory_cap_bytes")
    drop_text = "-" if drop is None else (f"{100 * drop:g}% of the baseline's" if a.get("max_drop_relative")
                                          else metric.delta_text(metric.sign * drop).lstrip("+"))
    samples = settings.get("train_samples")
    lines = [f"### advisor: study {study.name}", "",
             f"- **Measured**: {_code(str(a.get('workload_path') or '?'))} ({a.get('workload', 'train')}), "
             + (f"{samples:,} training samples per trial, " if isinstance(samples, int) else "")
             + f"device {settings.get('device') or '?'}; search space {a.get('space_name') or '?'}",
             f"- **Hardware**: {hw.get('cpu_model', '?')}, {hw.get('cpu_cores', '?')} CPU cores; GPUs: {gpus}; "
             f"torch {hw.get('torch_version') or '?'}, CUDA {hw.get('cuda_version') or '-'}",
             f"- **Metric**: {metric.name} ({metric.direction_word}); max drop {drop_text} vs the baseline; "
             f"memory cap {fmt_bytes(cap) if cap else 'none'}"]
    if base is not None and base.figures is not None:
        f = base.figures
        noise = study.metric_noise
        lines.append(f"- **Baseline**: trial {base.number} {_code(base.description)}: "
                     f"{fmt_rate(study.shown_throughput(base))} "
                     f"samples/s, {fmt_bytes(f.peak_memory_bytes)}, {metric.name} {metric.value_text(f.score)}"
                     + (f" (mean of {len(noise.values)} seeds, noise {metric.noise_text(noise.epsilon)})"
                        if noise is not None and noise.values else ""))
    else:
        lines.append("- **Baseline**: not completed yet: no ratios")
    c = counts(study)
    failed = ", ".join(f"{k} {v}" for k, v in sorted(c["failed_by_class"].items()))
    lines.append(f"- **Trials**: {c['trials']} run, {c['completed']} completed, {c['failed']} failed"
                 + (f" ({failed})" if failed else "") + f", {c['infeasible']} infeasible"
                 + (f", {c['probed_only']} probed only" if c["probed_only"] else ""))
    confirmed = sorted(study.confirmations)
    if base is not None:
        lines.append("- **Ratios**: " + (
            f"trials {', '.join(map(str, confirmed))} confirmed in pairs (95% intervals); the others are unconfirmed"
            if confirmed else "none confirmed in pairs yet: all are unconfirmed")
            + ": one trial against the baseline as measured by then"
            + (f". {note}" if (note := resident_note(study.confirmations.values())) else ""))
    lines += ["", "#### Picks", "", *_picks(study, storage_url), "", "#### Pareto front", ""]
    rows = front_rows(study)
    if not rows:
        return "\n".join([*lines, "No completed trial yet."])
    lines += [f"| trial | configuration | samples/s | vs base | peak memory | vs base | {metric.name} | "
              f"Δ {metric.name} |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    kinds: set[str] = set()
    for row in rows:
        r, f, vs = row.record, row.figures, row.versus
        label = f"{r.number}{' (baseline)' if r.baseline else ''}{'' if row.on_front else ', not on the front'}"
        caveats = study.shown_caveats(r)  # a disturbed baseline's row: its reference, as tune's table
        kinds.update(c.kind for c in caveats)
        lines.append(f"| {label} | {_cell(_code(r.description))} | {fmt_rate(study.shown_throughput(r))}"
                     f"{mark(caveats)} | "
                     f"{_cell(vs.throughput_text())} | {fmt_bytes(f.peak_memory_bytes)} | {_cell(vs.memory_text())} | "
                     f"{metric.value_text(f.score)} | {_cell(vs.metric_text(metric))} |")
    if (key := legend(kinds)):
        lines += ["", key + "."]
    if study.shown_baseline_reference is not None:
        lines += ["", f"{DISTURBED_BASELINE_NOTE}."]
    return "\n".join(lines)


def _picks(study: StoredStudy, storage_url: str | None) -> list[str]:
    try:
        chosen = [(how, pick(study, how)) for how in PICKS]
    except StudyError as exc:
        return [f"Nothing to pick yet: {exc}."]
    where = "" if storage_url in (None, DEFAULT_STORAGE) else f" --storage {shlex.quote(storage_url)}"
    lines = []
    for how, r in chosen:
        vs = study.versus_baseline(r)
        command = f"advisor export{where} --study {shlex.quote(study.name)} --trial {r.number} -o {how}.yaml"
        tie = tie_note(study, how, r)
        lines.append(f"- **{how}**: trial {r.number} {_code(r.description)}: {vs.summary(study.metric)}; "
                     + (f"{tie}; " if tie else "") + f"export it: `{command}`")
    return lines


def notes(study: StoredStudy, storage_url: str | None = None, trials: set[int] | None = None) -> dict[int | None, str]:
    """advisor's block of each note: the study's (key None) and each trial's that has one
    (only those in ``trials`` when given), by trial number."""
    on_front = {r.number for r in study.front()}
    picks = picks_by_trial(study)
    out: dict[int | None, str] = {None: study_note(study, storage_url)}
    for r in study.records:
        if trials is not None and r.number not in trials:
            continue
        text = trial_note(study, r, on_front, picks)
        if text is not None:
            out[r.number] = text
    return out
