"""Choose a trial (by number or by a pick rule) and write its configuration to a file:
the export document (``advisor.core.export_format``) as YAML or JSON, or a runnable
Python script."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from advisor.core.errors import ConfigError, StudyError
from advisor.core.export_format import FORMAT_VERSION, serialise, write_atomically
from advisor.core.objectives import DIRECTIONS, Figures
from advisor.core.stored import StoredStudy, TrialRecord

PICKS = ("fastest", "smallest", "most-accurate", "balanced")
FORMATS = ("yaml", "json", "python")


def pick(study: StoredStudy, how: str) -> TrialRecord:
    """A trial of the feasible Pareto front.

    fastest: highest throughput; smallest: lowest peak memory; most-accurate: highest
    accuracy; balanced: closest to the ideal point after scaling each objective to [0, 1]
    over the front (ties go to the faster trial).
    """
    if how not in PICKS:
        raise StudyError(f"--pick {how!r} is unknown (expected one of {', '.join(PICKS)})")
    front = study.front()
    if not front:
        raise StudyError(f"study {study.name!r} has no feasible completed trial to pick from")
    figures = {r.number: r.figures for r in front if r.figures is not None}  # every front trial has them
    if how == "fastest":
        return max(front, key=lambda r: figures[r.number].throughput)
    if how == "smallest":
        return min(front, key=lambda r: figures[r.number].peak_memory_bytes)
    if how == "most-accurate":
        return max(front, key=lambda r: figures[r.number].accuracy)
    points = list(figures.values())
    return min(front, key=lambda r: (_distance_to_ideal(figures[r.number], points), -figures[r.number].throughput))


def _distance_to_ideal(point: Figures, front: list[Figures]) -> float:
    """Distance to the ideal point, each objective scaled to [0, 1] over the front."""
    total = 0.0
    for i, direction in enumerate(DIRECTIONS):
        values = [p[i] for p in front]
        lo, hi = min(values), max(values)
        if hi == lo:
            continue
        score = (point[i] - lo) / (hi - lo)
        if direction == "minimize":
            score = 1.0 - score
        total += (1.0 - score) ** 2
    return total**0.5


def trial_by_number(study: StoredStudy, number: int) -> TrialRecord:
    """The completed trial ``number``; a duplicate resolves to the trial it repeated."""
    if not 0 <= number < len(study.records):
        raise StudyError(f"study {study.name!r} has no trial {number} (trials 0-{len(study.records) - 1})")
    record = study.records[number]
    if record.duplicate_of is not None:
        record = study.records[record.duplicate_of]
    if record.state != "complete":
        cls = record.failure_class or record.state
        raise StudyError(f"trial {number} of study {study.name!r} did not complete ({cls}): "
                         f"{record.failure_message or 'no result'}; nothing to export")
    return record


def export_document(study: StoredStudy, record: TrialRecord) -> dict[str, Any]:
    """The export file's content: the config, where it came from, what was measured."""
    assert record.config is not None
    measured = {k: record.get(k) for k in ("throughput", "peak_memory_bytes", "accuracy", "step_time_median_s",
                                            "step_time_iqr_s", "compile_s")}
    if study.baseline is not None and record.figures is not None:
        measured["vs_baseline"] = study.versus_baseline(record).to_dict()
    u = study.attrs
    return {
        "advisor_config": FORMAT_VERSION,
        "config": record.config.to_dict(),  # every knob, also for older studies
        "source": {
            "study": study.name,
            "trial": record.number,
            "workload": u.get("workload_path"),
            "workload_sha256": u.get("workload_sha256"),
            "workload_kind": u.get("workload", "train"),  # apply(..., workload=this)
            "train_samples": u.get("settings", {}).get("train_samples"),
            "exported": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        },
        "measured": measured,
        "hardware": u.get("hardware", {}),
    }


def render(document: dict[str, Any], fmt: str = "yaml", name: str = "this_file.py") -> str:
    """The export document as a config file (yaml, json) or a runnable script (python,
    ``name`` being the script's file name)."""
    if fmt == "python":
        from advisor.outputs.python_script import python_script

        return python_script(document, name)
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r} (expected {', '.join(FORMATS)})")
    return serialise(document, fmt)


def write_export(document: dict[str, Any], path: str | Path | None, fmt: str = "yaml") -> str:
    """Render the document; write it to ``path`` atomically when given. Returns the text."""
    text = render(document, fmt, Path(path).name if path is not None else "this_file.py")
    if path is not None:
        write_atomically(path, text)
    return text
