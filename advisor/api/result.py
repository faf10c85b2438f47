"""What ``advisor.tune()`` returns: the study's front against the baseline, the picks,
and ``export()``, read from the study's storage (the same figures ``advisor tune`` prints)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.core.errors import StudyError
from advisor.core.metric import MetricSpec
from advisor.core.picks import OLDER_PICKS, PICKS, pick
from advisor.core.stored import SCORE_OUT, StoredStudy
from advisor.outputs.export import export_document, output_format, trial_by_number, write_export
from advisor.outputs.summary import counts, front_rows


@dataclass
class TuneResult:
    """A finished (or stopped) study.

    ``front``: the baseline and the feasible Pareto front, one dict per trial (as ``advisor
    tune --json`` prints them: config, throughput, peak memory, metric, ratios to the
    baseline with their intervals where confirmed). ``picks``: pick name -> trial number.
    """

    study_name: str
    storage: str
    workload_path: str
    stop_reason: str | None
    counts: dict[str, Any]
    front: list[dict[str, Any]]
    picks: dict[str, int] = field(default_factory=dict)
    metric: MetricSpec = field(default_factory=MetricSpec)
    _study: StoredStudy | None = field(default=None, repr=False)

    @classmethod
    def of(cls, study: StoredStudy, storage: str, workload_path: str, stop_reason: str | None) -> TuneResult:
        picks = {}
        if study.front():
            picks = {how: pick(study, how).number for how in PICKS}
        return cls(study.name, storage, workload_path, stop_reason, counts(study),
                   [row.to_dict() for row in front_rows(study)], picks, study.metric, study)

    @property
    def interrupted(self) -> bool:
        return bool(self.stop_reason and self.stop_reason.startswith("interrupted"))

    def config(self, pick: str = "balanced", trial: int | None = None) -> dict[str, Any]:
        """The configuration of a pick (or of trial ``trial``): every knob, as ``advisor.apply()`` takes it."""
        return self._document(pick, trial)["config"]

    def export(self, path: str | Path | None = None, pick: str = "balanced", trial: int | None = None,
               format: str | None = None) -> str:
        """The export document of a pick (or of trial ``trial``) as yaml, json, a runnable
        python script, or in transformers' (hf), accelerate's or torchrun's terms; written to
        ``path`` (atomically) when given. Returns the text. ``format`` None: the one ``path``'s
        suffix names (.yaml, .json, .py, .sh), else yaml; a format the name contradicts
        (``"best.yaml"`` with hf) is refused (ConfigError) before anything is written."""
        fmt = output_format(path, format, f"export(format={format!r})")
        return write_export(self._document(pick, trial), path, fmt)

    def _document(self, how: str, trial: int | None) -> dict[str, Any]:
        assert self._study is not None
        how = OLDER_PICKS.get(how, how)
        if trial is not None:
            record = trial_by_number(self._study, trial)
        elif how not in PICKS:
            raise StudyError(f"pick={how!r} is unknown (expected one of {', '.join(PICKS)})")
        elif how not in self.picks:
            raise StudyError(f"study {self.study_name!r} has no feasible completed trial to pick from")
        else:
            record = trial_by_number(self._study, self.picks[how])
        return export_document(self._study, record)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython / Jupyter
        printer.text(self.summary())

    def summary(self) -> str:
        """One line per front row, as text."""
        lines = [f"study {self.study_name!r} in {self.storage}" + (f" (stopped: {self.stop_reason})"
                                                                   if self.stop_reason else "")]
        for row in self.front:
            ratio = row.get("throughput_ratio")
            mark = " (baseline)" if row["baseline"] else ""
            lines.append(f"  trial {row['trial']}{mark}: {row['throughput']:,.0f} samples/s"
                         + (f" ({ratio:.2f}x)" if ratio is not None else "")
                         + f", {self.metric.name} {self.metric.value_text(row[SCORE_OUT])}")
        lines.append("  picks: " + ", ".join(f"{k} = trial {v}" for k, v in self.picks.items()))
        return "\n".join(lines)
