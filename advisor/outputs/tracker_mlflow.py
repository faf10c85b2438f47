"""``--log-to mlflow``: the study as an MLflow run, each trial a run nested under it.

Where: the tracking URI given (``--log-to mlflow:URI``), else MLflow's own choice
($MLFLOW_TRACKING_URI, or its default: ``sqlite:///mlflow.db`` in the working directory,
``./mlruns`` where that holds runs already). The experiment: $MLFLOW_EXPERIMENT_NAME, else
the study's name, created when missing.

The study's run (tag ``advisor.role`` = study; its settings and the hardware fingerprint
as tags, as they may change when the study is resumed) is the parent (``mlflow.parentRunId``)
of one run per trial (``advisor.role`` = trial, ``advisor.trial`` = its number): its knobs
as parameters, its figures as metrics, its state and failure as tags, FAILED when it
failed. A confirmation is logged on the trial's run (``confirmed/*``, one step per pair),
the front at the end as the study run's ``front`` tag and ``on_front`` on the trials' runs.
A resumed study goes on in its parent run and skips the trials already there.

An MLflow server is asked for its /health first (10 s at most): one that does not answer
is refused before the study starts, rather than after MLflow's own retries (7, about 4
minutes, $MLFLOW_HTTP_REQUEST_MAX_RETRIES). A server lost mid-study costs those retries
once, then the tracker is dropped.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from advisor.core.errors import StudyError
from advisor.outputs.tracker_logs import Confirmed, EndLog, StudyLog, TrialLog
from advisor.study.storage.guard import shown_url

STATUS = {"finished": "FINISHED", "interrupted": "KILLED", "failed": "FAILED"}
PROBE_S = 10.0  # how long an MLflow server may take to answer /health before the study
STUDY, TRIAL = "study", "trial"  # advisor.role


def reachable(uri: str, timeout: float = PROBE_S) -> None:
    """Raise StudyError when an MLflow server at ``uri`` (http or https) does not answer at
    all; any HTTP answer will do (MLflow's own calls then say what is wrong)."""
    import urllib.error
    import urllib.request

    if not uri.startswith(("http://", "https://")):
        return
    try:
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout).close()  # noqa: S310 - the user's URI
    except urllib.error.HTTPError:
        return  # it answered
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StudyError(f"the MLflow server at {shown_url(uri)} does not answer ({reason})") from None


def _ms(seconds: float | None) -> int:
    return int(1000 * (time.time() if seconds is None else seconds))


class MlflowTracker:
    name = "mlflow"

    def __init__(self, where: str | None, study: str) -> None:
        import mlflow
        from mlflow import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.WARNING)  # no INFO lines among the study's own
        self.uri = where or mlflow.get_tracking_uri()
        reachable(self.uri)
        self.client = MlflowClient(tracking_uri=self.uri)
        self.experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or study
        found = self.client.get_experiment_by_name(self.experiment)  # the store answers, or this raises
        if found is not None and found.lifecycle_stage != "active":
            raise StudyError(f"MLflow experiment {self.experiment!r} at {shown_url(self.uri)} is deleted: restore "
                             "it (mlflow experiments restore), or name another with $MLFLOW_EXPERIMENT_NAME")
        self.experiment_id: str | None = found.experiment_id if found is not None else None
        self.where = f"MLflow experiment {self.experiment!r} at {shown_url(self.uri)}"
        self.parent = ""
        self.runs: dict[int, str] = {}  # trial number -> its run
        self.on_front: set[int] = set()  # the trials whose run says on_front = true

    def start(self, study: StudyLog) -> None:
        if self.experiment_id is None:
            self.experiment_id = self.client.create_experiment(self.experiment)
        for run in self._runs_of(study.name):
            tags = run.data.tags
            if tags.get("advisor.role") == STUDY and not self.parent:
                self.parent = run.info.run_id
            elif tags.get("advisor.role") == TRIAL and tags.get("advisor.trial", "").isdigit():
                self.runs[int(tags["advisor.trial"])] = run.info.run_id
                if tags.get("on_front") == "true":
                    self.on_front.add(int(tags["advisor.trial"]))
        if self.parent:  # a resumed study: its run goes on
            self.client.update_run(self.parent, status="RUNNING")
        else:
            self.parent = self.client.create_run(self.experiment_id, run_name=study.name, tags={
                "advisor.study": study.name, "advisor.role": STUDY}).info.run_id
        self._log(self.parent, tags=study.settings | {f"hardware.{k}": v for k, v in study.hardware.items()})

    def trial(self, trial: TrialLog) -> None:
        if trial.number in self.runs:  # logged by an earlier run of this study
            return
        tags = {"mlflow.parentRunId": self.parent, "advisor.role": TRIAL} | trial.tags
        run = self.client.create_run(self.experiment_id, start_time=_ms(trial.started), tags=tags,  # type: ignore[arg-type]
                                     run_name=trial.name[:250]).info.run_id
        self._log(run, trial.metrics, {k: str(v) for k, v in trial.params.items()})
        self.client.set_terminated(run, "FINISHED" if trial.ok else "FAILED", end_time=_ms(trial.ended))
        self.runs[trial.number] = run

    def study(self, metrics: dict[str, float], tags: dict[str, str]) -> None:
        self._log(self.parent, metrics, tags=tags)

    def confirmed(self, c: Confirmed) -> None:
        run = self.runs.get(c.number)
        if run is not None:
            self._log(run, c.metrics, tags=c.tags, step=c.step)
        else:  # a trial not logged here (stored before --log-to was given): on the study's run
            self._log(self.parent, {f"trial_{c.number}/{k}": v for k, v in c.metrics.items()},
                      tags={f"trial_{c.number}/{k}": v for k, v in c.tags.items()}, step=c.step)

    def finish(self, end: EndLog) -> None:
        self._log(self.parent, end.metrics, tags=end.tags)
        front = {int(row["trial"]) for row in end.front}
        for number, run in self.runs.items():
            if (number in front) != (number in self.on_front):
                self.client.set_tag(run, "on_front", str(number in front).lower())
        self.client.set_terminated(self.parent, STATUS[end.status])

    def _runs_of(self, study: str) -> list[Any]:
        from mlflow.entities import ViewType

        found: list[Any] = []
        token = None
        while True:
            page = self.client.search_runs([self.experiment_id], f"tags.`advisor.study` = '{study}'",  # type: ignore[list-item]
                                           ViewType.ACTIVE_ONLY, max_results=1000, page_token=token)
            found.extend(page)
            token = page.token
            if not token:
                return found

    def _log(self, run: str, metrics: dict[str, float] | None = None, params: dict[str, str] | None = None,
             tags: dict[str, str] | None = None, step: int = 0) -> None:
        from mlflow.entities import Metric, Param, RunTag

        now = _ms(None)
        self.client.log_batch(run, metrics=[Metric(k, v, now, step) for k, v in (metrics or {}).items()],
                              params=[Param(k, v) for k, v in (params or {}).items()],
                              tags=[RunTag(k, v) for k, v in (tags or {}).items() if v != ""])
