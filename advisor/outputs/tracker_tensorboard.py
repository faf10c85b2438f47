"""``--log-to tensorboard``: event files for TensorBoard, written with PyTorch's
``SummaryWriter`` (which needs the tensorboard package).

Where: the directory given (``--log-to tensorboard:DIR``), else ``./runs`` (the
SummaryWriter's own default), and in it a folder per study, ``runs/<study>/``, which
``tensorboard --logdir runs/<study>`` shows:

- ``study/``: the settings and the hardware fingerprint (text), the baseline's figures,
  the counts and the front at the end;
- ``trial-0003/`` per trial: its knobs, state and failure class in the HParams dashboard
  (one session per trial), its figures as scalars (step 0), its tags (failure message
  included) as text, and its confirmed ratios (``confirmed/*``, one step per pair).

A trial whose folder already holds event files (an earlier run of a resumed study) is
not written again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.errors import StudyError
from advisor.outputs.tracker_logs import Confirmed, EndLog, StudyLog, TrialLog

# knobs that may be None (threads, pp_microbatches): written as text, so that every trial
# gives them the same type in the HParams dashboard
_TEXT_KNOBS = {name for name, value in TrialConfig().to_dict().items() if value is None}


def _table(rows: dict[str, Any]) -> str:
    """A two-column Markdown table (TensorBoard renders text summaries as Markdown)."""
    cells = "\n".join(f"| {k} | {str(v).replace('|', '/').replace(chr(10), ' ')} |" for k, v in rows.items())
    return "| | |\n|---|---|\n" + cells


def _writable(folder: Path) -> bool:
    """Whether ``folder`` can be created (or written, when it exists)."""
    here = folder.absolute()
    while not here.exists():
        here = here.parent
    return here.is_dir() and os.access(here, os.W_OK | os.X_OK)


class TensorBoardTracker:
    name = "tensorboard"

    def __init__(self, where: str | None, study: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer_class = SummaryWriter
        self.root = Path(where or "runs").expanduser() / study
        if not _writable(self.root):
            raise StudyError(f"{self.root} cannot be written")
        self.where = f"TensorBoard event files in {self.root}/ (tensorboard --logdir {self.root})"
        self.writer: Any = None  # the study's, open while the study runs
        self.confirming: dict[int, Any] = {}  # a trial's writer for its confirmation pairs

    def start(self, study: StudyLog) -> None:
        self.writer = self.writer_class(str(self.root / "study"))
        self.writer.add_text("settings", _table(study.settings))
        self.writer.add_text("hardware", _table(study.hardware))
        self.writer.flush()

    def trial(self, trial: TrialLog) -> None:
        from torch.utils.tensorboard.summary import hparams

        folder = self._folder(trial.number)
        if any(folder.glob("events.out.tfevents.*")):  # logged by an earlier run of this study
            return
        knobs = {k: str(v) if k in _TEXT_KNOBS else v for k, v in trial.params.items()}
        knobs |= {"state": trial.tags["state"], "failure_class": trial.tags.get("failure_class", "")}
        _, start, end = hparams(knobs, trial.metrics)  # the experiment is left to TensorBoard: every session
        with self.writer_class(str(folder)) as w:
            w.file_writer.add_summary(start)
            w.file_writer.add_summary(end)
            for key, value in trial.metrics.items():
                w.add_scalar(key, value, 0)
            w.add_text("trial", _table({"name": trial.name} | trial.tags))

    def study(self, metrics: dict[str, float], tags: dict[str, str]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, 0)
        for key, text in tags.items():
            self.writer.add_text(key, text)
        self.writer.flush()

    def confirmed(self, c: Confirmed) -> None:
        folder = self._folder(c.number)
        if folder.is_dir():
            w = self.confirming.get(c.number) or self.writer_class(str(folder))
            self.confirming[c.number] = w
            prefix = ""
        else:  # a trial not logged here (stored before --log-to was given): in the study's folder
            w, prefix = self.writer, f"trial_{c.number}/"
        for key, value in c.metrics.items():
            w.add_scalar(prefix + key, value, c.step)
        w.add_text(prefix + "confirmation", _table(c.tags), c.step)
        w.flush()

    def finish(self, end: EndLog) -> None:
        try:
            self.study(end.metrics, end.tags)
            if end.front:
                columns = list(end.front[0])
                self.writer.add_text("front", "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
                                     + "\n".join("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |"
                                                 for row in end.front))
        finally:
            for w in [*self.confirming.values(), self.writer]:
                w.close()

    def _folder(self, number: int) -> Path:
        return self.root / f"trial-{number:04d}"
