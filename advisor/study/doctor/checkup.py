"""``advisor doctor``: each knob option this machine offers, run alone
(``advisor.study.doctor.offered``) in a fresh trial process, on the built-in tiny model
(and on a user's model.py, a few probed steps), beside the reference run of the same model
(run before the options, halfway through and after them; ratios are to the median, of the
runs the noise sentinel found undisturbed when there are any).

Every run goes through the Ray executor and the fork server, as ``advisor tune``'s trials
do, one at a time with the whole node (CPU) or one GPU; equal runs run once. A failure
(error, crash, unsupported, oom; not a timeout) is the option's own when the run without
it (its context: the knobs it needs) works; otherwise it is not judged. The verdicts are
stored by ``advisor.machine.doctor_store`` and applied by ``advisor.study.run.plan``.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.noise import DISTURBED_AT, off_by, reading_of
from advisor.core.results import TrialPayload, TrialResult, TrialSettings
from advisor.core.settle import TOLERANCE
from advisor.core.units import first_line
from advisor.machine.doctor_store import BUILTIN, FAILS, Verdict
from advisor.machine.hardware import Hardware
from advisor.study.doctor.offered import Option, changes
from advisor.techniques.registry import preloads
from advisor.techniques.rules import refusal
from advisor.workload.contract import Workload

TRIAL_TIMEOUT = 180.0  # seconds one option may run (compile's autotuning is the slowest)
FAILED_CLASSES = ("error", "crash", "unsupported", "oom")  # a timeout is not a failure


@dataclass(frozen=True)
class Subject:
    """A model the doctor runs the options on, and how each run measures."""

    label: str  # BUILTIN, or the model.py's path
    workload: Workload
    facts: dict[str, Any]
    base: TrialConfig  # the reference: fp32 defaults, or the model's BASELINE
    sha256: str | None  # None for the built-in model
    settings: TrialSettings  # for training runs (inference runs: the same, workload changed)
    serving: bool = False  # model() is frozen for serving (no trainable parameter): inference runs only


@dataclass
class Row:
    option: Option
    status: str  # works, fails, timeout, not judged, not run
    result: TrialResult | None = None
    throughput_ratio: float | None = None
    memory_ratio: float | None = None
    note: str = ""
    disturbed: str = ""  # why its speed is not comparable (a busy machine), or ''

    @property
    def error(self) -> str:
        r = self.result
        return first_line(r.failure_message) if r is not None and not r.ok else ""

    def to_dict(self, base: TrialConfig) -> dict[str, Any]:
        r = self.result
        return {"knob": self.option.knob, "value": self.option.value, "workload": self.option.workload,
                "run": changes(self.option.config, base), "status": self.status,
                "failure_class": r.failure_class if r is not None else None, "error": self.error,
                "throughput_ratio": self.throughput_ratio, "memory_ratio": self.memory_ratio,
                "throughput": r.throughput if r is not None else None,
                "peak_memory_bytes": r.peak_memory_bytes if r is not None else None, "note": self.note,
                "disturbed": self.disturbed, "pid": r.pid if r is not None else None}


@dataclass
class Outcome:
    """The doctor's findings on one model."""

    subject: Subject
    rows: list[Row] = field(default_factory=list)
    references: dict[str, list[TrialResult]] = field(default_factory=dict)  # per workload: first, halfway, last
    problem: str = ""  # the reference failed: nothing judged
    interrupted: bool = False  # stopped (SIGINT) before every option ran: rows not run say so
    sentinel_median: float | None = None  # the noise sentinel's median reading over the model's runs

    def disturbed(self, r: TrialResult) -> str:
        """Why ``r``'s speed is not comparable (the machine was busy), or ''."""
        reading, median = reading_of(r.telemetry), self.sentinel_median
        if reading is None or median is None or off_by(reading, median) <= DISTURBED_AT:
            return ""
        return f"machine disturbed during the run (noise sentinel {off_by(reading, median):.1f}x off its median)"

    def verdicts(self) -> list[Verdict]:
        """What is stored: every option that ran (none when the reference failed)."""
        s, now = self.subject, time.time()
        return [Verdict(r.option.knob, r.option.value, r.status, s.label, s.sha256, r.option.workload, r.error,
                        r.result.failure_class if r.result is not None else None, r.throughput_ratio,
                        r.memory_ratio, changes(r.option.config, s.base), r.note, now)
                for r in self.rows if r.result is not None and not self.problem]

    def to_dict(self) -> dict[str, Any]:
        s = self.subject
        return {"model": s.label, "sha256": s.sha256, "reference": s.base.to_dict(), "problem": self.problem,
                "interrupted": self.interrupted,
                "references": {w: [r.to_dict() for r in rs] for w, rs in self.references.items()},
                "sentinel_median_s": self.sentinel_median, "options": [r.to_dict(s.base) for r in self.rows]}


def _key(kind: str, config: TrialConfig) -> str:
    return kind + json.dumps(config.to_dict(), sort_keys=True)


def run_doctor(hw: Hardware, subjects: list[Subject], options: list[list[Option]], timeout: float = TRIAL_TIMEOUT,
               on_run: Callable[[str, str, TrialResult, float], None] | None = None) -> list[Outcome]:
    """Run each subject's options and its reference (before, halfway through and after
    them), one fresh trial process each, one at a time; equal runs run once.
    ``on_run(model, what, result, seconds)`` is told of each run as it ends. Interrupted
    (SIGINT), it returns what ran: that model's outcome ``interrupted``, later models too."""
    from advisor.runner.ray_executor import RayExecutor

    ahead = preloads(item for opts in options for o in opts if o.config is not None
                     for item in o.config.to_dict().items())
    executor = RayExecutor(hw.device, preload=ahead).start()
    try:
        runner = _Runner(executor, timeout, on_run)
        outcomes: list[Outcome] = []
        for subject, opts in zip(subjects, options):
            if outcomes and outcomes[-1].interrupted:  # not reached: each of its options "not run"
                skipped = Outcome(subject, interrupted=True)
                skipped.rows = [_row(o, {}, skipped) for o in opts]
                outcomes.append(skipped)
            else:
                outcomes.append(runner.examine(subject, opts))
        return outcomes
    finally:
        executor.shutdown()


class _Runner:
    def __init__(self, executor: Any, timeout: float, on_run: Callable[..., None] | None) -> None:
        self.executor, self.timeout, self.on_run, self.number = executor, timeout, on_run, 0

    def measure(self, subject: Subject, kind: str, config: TrialConfig, label: str) -> TrialResult:
        from advisor.runner.executor import run_one

        settings = replace(subject.settings, workload=kind)
        t = time.perf_counter()
        result = run_one(self.executor, self.number, TrialPayload.of(subject.workload, config, settings), self.timeout)
        self.number += 1
        if self.on_run is not None:
            self.on_run(subject.label, label, result, time.perf_counter() - t)
        return result

    def examine(self, subject: Subject, opts: list[Option]) -> Outcome:
        outcome, results = Outcome(subject), {}
        kinds = list(dict.fromkeys(o.workload for o in opts if o.config is not None))
        labels = {_key(o.workload, o.config): o.label for o in reversed(opts) if o.config is not None}
        runs = {_key(o.workload, c): (o.workload, c) for o in opts for c in (o.context, o.config) if c is not None}
        try:
            for kind in kinds:
                first = self.measure(subject, kind, subject.base, f"reference ({kind})")
                outcome.references[kind] = [first]
                if not first.ok:
                    outcome.problem = f"the reference run ({kind}) failed: {first_line(first.failure_message)}"
            if not outcome.problem:
                for i, (key, (kind, config)) in enumerate(runs.items()):
                    if i == len(runs) // 2:  # the references again halfway and at the end: ratios are to their median
                        self.again(subject, kinds, outcome)
                    results[key] = self.measure(subject, kind, config,
                                                labels.get(key) or _run_label(config, subject.base))
                self.again(subject, kinds, outcome)
        except KeyboardInterrupt:  # what ran is kept; the rest is "not run"
            outcome.interrupted = True
        done = [*results.values(), *(r for refs in outcome.references.values() for r in refs)]
        known = [x for x in map(reading_of, (r.telemetry for r in done)) if x is not None]
        outcome.sentinel_median = statistics.median(known) if len(known) >= 3 else None
        outcome.rows = [_row(o, results, outcome) for o in opts]
        return outcome

    def again(self, subject: Subject, kinds: list[str], outcome: Outcome) -> None:
        for kind in kinds:
            outcome.references[kind].append(self.measure(subject, kind, subject.base, f"reference ({kind}) again"))


def _run_label(config: TrialConfig, base: TrialConfig) -> str:
    return " ".join(f"{k}={json.dumps(v)}" for k, v in changes(config, base).items())


def _row(o: Option, results: dict[str, TrialResult], outcome: Outcome) -> Row:
    if o.config is None:
        return Row(o, "not run", note=o.note)
    if outcome.interrupted and _key(o.workload, o.config) not in results:
        return Row(o, "not run", note="not run: the doctor was interrupted first")
    if outcome.problem:
        return Row(o, "not run", note=f"not run: {outcome.problem}")
    r = results[_key(o.workload, o.config)]
    row = Row(o, _status(r), r, disturbed=outcome.disturbed(r) if r.ok else "")
    refs = [x for x in outcome.references.get(o.workload, []) if x.ok]
    refs = [x for x in refs if not outcome.disturbed(x)] or refs  # disturbed ones only when all were
    if r.ok and refs:
        speed = statistics.median(x.throughput or 0.0 for x in refs)
        memory = statistics.median(x.peak_memory_bytes or 0 for x in refs)
        row.throughput_ratio = r.throughput / speed if r.throughput and speed else None
        row.memory_ratio = r.peak_memory_bytes / memory if r.peak_memory_bytes and memory else None
    if row.status == FAILS and o.context is not None:
        if _key(o.workload, o.context) == _key(o.workload, o.config):
            row.status, row.note = "not judged", "its run is that of the knobs it needs (judged there)"
        elif _key(o.workload, o.context) not in results:
            row.status, row.note = "not judged", "the run it needs was not run (the doctor was interrupted)"
        elif results[_key(o.workload, o.context)].ok is False:
            needs = " ".join(f"{k}={json.dumps(v)}" for k, v in changes(o.context, outcome.subject.base).items())
            row.status, row.note = "not judged", f"the run it needs ({needs}) fails without it"
    return row


def _status(r: TrialResult) -> str:
    if r.ok:
        return "works"
    if r.failure_class in FAILED_CLASSES:
        return FAILS
    return "timeout" if r.failure_class == "timeout" else "not judged"


def builtin_subject(directory: str, hw: Hardware, tolerance: float = TOLERANCE) -> Subject:
    """The built-in tiny model, copied into ``directory`` (a private temporary folder: a
    model.py's folder goes on ``sys.path``), measured in full: a few training steps,
    QAT's conversion and pruning's finish, the evaluation, then about half a second timed."""
    from pathlib import Path

    from advisor.workload import doctor_model
    from advisor.workload.contract import load_workload
    from advisor.workload.preflight import preflight

    path = Path(directory) / "tiny_model.py"
    path.write_text(Path(doctor_model.__file__).read_text())
    workload = load_workload(path)
    base = TrialConfig.from_dict(workload.baseline)
    settings = TrialSettings(train_samples=2 * base.batch_size, warmup_steps=2, min_steps=5, max_timing_s=0.5,
                             warmup_s=0.05, device=hw.device, timing_tolerance=tolerance)
    return Subject(BUILTIN, workload, preflight(workload), base, None, settings)


def user_subject(workload: Workload, hw: Hardware, tolerance: float = TOLERANCE) -> Subject:
    """A user's model.py (loaded), checked as ``advisor tune`` checks it (preflight,
    BASELINE; a WorkloadError, exit status 2, before anything runs), then probed: a few
    training steps and about a second timed, no evaluation. A model frozen for serving is
    checked as an inference study checks it, and its options run for inference only (a
    review's doctor refused it, saying to tune it with --workload inference)."""
    from advisor.core.errors import WorkloadError
    from advisor.workload.preflight import preflight

    # once, as inference: a trainable model is checked through its training step all the same
    facts = preflight(workload, "inference")
    serving = not facts["trainable"]
    base = TrialConfig.from_dict(workload.baseline, where="BASELINE", source=str(workload.path))
    reason = refusal(base, "inference" if serving else "train", hw.device)
    if reason:
        raise WorkloadError(f"{workload.path}: BASELINE: {reason}")
    settings = TrialSettings(train_samples=base.batch_size, warmup_steps=2, min_steps=3, max_timing_s=1.0,
                             warmup_s=0.1, device=hw.device, part="probe", timing_tolerance=tolerance)
    return Subject(str(workload.path), workload, facts, base, workload.sha256, settings, serving)
