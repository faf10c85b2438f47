"""``--log-to wandb``: the study as Weights & Biases runs grouped under its name.

Where: the project given (``--log-to wandb:PROJECT`` or ``wandb:ENTITY/PROJECT``), else
$WANDB_PROJECT, else ``advisor``; the entity $WANDB_ENTITY or the account's default; the
mode W&B's own ($WANDB_MODE, ``wandb offline``): offline, the runs are written under
$WANDB_DIR (default: the working directory) in ``wandb/offline-run-*`` and ``wandb sync``
uploads them later. Online needs a login (``wandb login`` or $WANDB_API_KEY), checked
before the study starts: W&B never prompts in the middle of a study.

Runs, in the group named after the study: the study's run (job type ``study``), open
while the study runs: its settings and the hardware fingerprint as config, the baseline's
figures, each confirmation pair (``confirmation/trial_<n>/*``: a finished W&B run cannot
be added to offline), the counts and the front at the end in its summary. One run per
trial (job type ``trial``): its knobs as config, its figures logged, its state (and
failure class) as tags and in the summary with the failure message; a failed trial's run
ends with exit code 1, which W&B shows as failed. A resumed study adds a study run for
each run of ``advisor tune``; its earlier trials are not logged again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from advisor.core.errors import StudyError
from advisor.outputs.tracker_logs import Confirmed, EndLog, StudyLog, TrialLog

MODES = {"online": "online", "run": "online", "offline": "offline", "dryrun": "offline", "disabled": "disabled",
         "shared": "shared"}


class WandbTracker:
    name = "wandb"

    def __init__(self, where: str | None, study: str) -> None:
        import wandb

        self.wandb = wandb
        entity, _, project = (where or "").rpartition("/")
        self.project = project or os.environ.get("WANDB_PROJECT") or "advisor"
        self.entity = entity or os.environ.get("WANDB_ENTITY") or None
        mode = os.environ.get("WANDB_MODE") or str(wandb.setup().settings.mode)
        if mode not in MODES:
            raise StudyError(f"$WANDB_MODE is {mode!r}, expected one of {', '.join(MODES)}")
        self.mode = MODES[mode]
        self.dir = os.environ.get("WANDB_DIR") or None
        if self.mode in ("online", "shared") and wandb.run is None and not wandb.login(prompt=False, verify=False):
            raise StudyError("not logged in to Weights & Biases: run `wandb login` (or set WANDB_API_KEY), or set "
                             "WANDB_MODE=offline to write the runs here and `wandb sync` them later")
        self.group = study
        local = Path(self.dir or ".") / "wandb"
        mode = {"offline": f" (offline, in {local}/: wandb sync uploads it)",
                "disabled": " (WANDB_MODE=disabled: nothing is kept)"}.get(self.mode, "")
        self.where = (f"W&B project {self.project!r}" + (f" of {self.entity!r}" if self.entity else "")
                      + f", group {study!r}{mode}")
        self.run: Any = None  # the study's, open while the study runs

    def _init(self, **named: Any) -> Any:
        return self.wandb.init(project=self.project, entity=self.entity, group=self.group, dir=self.dir,
                               mode=self.mode,  # type: ignore[arg-type]  # one of MODES' values
                               reinit="create_new",  # never wandb.run: a user's own run stays theirs
                               settings=self.wandb.Settings(silent=True, console="off"), **named)

    def start(self, study: StudyLog) -> None:
        if self.dir is not None:
            Path(self.dir).mkdir(parents=True, exist_ok=True)
        name = study.name if study.job == "study" else f"{study.name}: {study.job}"  # advisor confirm: a run of its own
        self.run = self._init(job_type=study.job, name=name,
                              config={"study": study.settings, "hardware": study.hardware})

    def trial(self, trial: TrialLog) -> None:
        tags = [trial.tags["state"]] + (["baseline"] if trial.tags.get("baseline") == "true" else [])
        if "failure_class" in trial.tags:
            tags.append(trial.tags["failure_class"])
        run = self._init(job_type="trial", name=trial.name[:128], config=trial.params, tags=tags)
        try:
            run.log(trial.metrics)
            run.summary.update(trial.tags)
        finally:
            run.finish(exit_code=0 if trial.ok else 1)

    def study(self, metrics: dict[str, float], tags: dict[str, str]) -> None:
        self.run.summary.update({**metrics, **tags})

    def confirmed(self, c: Confirmed) -> None:
        prefix = f"confirmation/trial_{c.number}/"
        self.run.log({prefix + k.removeprefix("confirmed/"): v for k, v in c.metrics.items()})
        self.run.summary.update({prefix + k: v for k, v in c.tags.items()})

    def finish(self, end: EndLog) -> None:
        self.run.summary.update({**end.metrics, **end.tags, "front": end.front})
        self.run.finish(exit_code=1 if end.status == "failed" else 0)
