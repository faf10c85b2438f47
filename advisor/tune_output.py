"""What `advisor tune` prints: the setup, per-trial progress, and the final summary."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from advisor import report
from advisor import storage as st

if TYPE_CHECKING:
    import optuna

    from advisor.study import Tuner


class TuneOutput:
    """A rich progress bar on a terminal; plain lines otherwise; JSON summary with --json."""

    def __init__(self, json_mode: bool = False, quiet: bool = False) -> None:
        from rich.console import Console

        self.json_mode = json_mode
        self.quiet = quiet  # the live explorer shows the trials; only the summary is printed
        # With --json, stdout carries only the JSON summary: progress goes to stderr.
        self.console = Console(stderr=json_mode, highlight=False)
        if not self.console.is_terminal:
            self.console.width = 160  # logs and pipes: do not wrap the Pareto table at 80 columns
        self.progress: Any = None
        self.task: Any = None
        self.started = time.monotonic()
        self.trial_wall = 0.0
        self.trial_compute = 0.0
        self.ray_startup = 0.0
        self.best: float | None = None
        self.ended: float | None = None  # when a background study stopped (the explorer may stay open)

    def say(self, text: str) -> None:
        if self.quiet:
            return
        (self.progress.console if self.progress else self.console).print(text, markup=False)

    def prepared(self, tuner: Tuner) -> None:
        f = tuner.facts
        self.say(f"workload  {tuner.workload.path}" + (
            f"  ({f['parameters']:,} parameters; {f['train_size']} train / {f['val_size']} validation samples)"
            if "parameters" in f else "  (preflight skipped)"))
        hw = tuner.hardware
        self.say(f"hardware  {hw.cpu.model}, {hw.cpu.cores} cores" + (f"; {hw.gpu_names()}" if hw.gpus else "; no GPU"))
        self.say(f"space     {tuner.space.name}: {tuner.space.size()} configurations on this machine")
        for line in report.dropped_lines(tuner.space):
            self.say(f"          {line}")
        self.say(f"study     {tuner.study_name} in {tuner.url} ({tuner.o.trials} trials, "
                 f"{tuner.settings.train_samples} training samples each)")
        self.total = tuner.o.trials

    def event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "ray":
            self.ray_startup = data["startup_s"]
            self.say(f"ray       started in {data['startup_s']:.1f} s; {data['slots']} trial(s) at a time, "
                     f"each with {data['resources']}")
            self._start_progress()
        elif kind == "note":
            self.say(f"note      {data['text']}")
        elif kind == "timeout":
            self.say(f"timeout   {data['trial_timeout_s']:.0f} s per trial")
        elif kind == "finished":
            self._finished(data)
        elif kind == "stopped":
            self.ended = time.monotonic()
        elif kind == "cancelled":
            self.say(f"trial {data['number']:>3}  cancelled")

    def _start_progress(self) -> None:
        if self.json_mode or self.quiet or not self.console.is_terminal:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn("trials"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[best]}"), TimeRemainingColumn(), console=self.console)
        self.task = self.progress.add_task("trials", total=self.total, best="")
        self.progress.start()

    def _finished(self, data: dict[str, Any]) -> None:
        r = data["result"]
        self.trial_wall += data["wall_s"]
        self.trial_compute += r.compute_s
        config = report.describe_config(data["config"])
        if r.ok:
            if self.best is None or r.throughput > self.best:
                self.best = r.throughput
            text = (f"{r.throughput:,.0f} samples/s, {report.fmt_bytes(r.peak_memory_bytes)}, "
                    f"accuracy {r.accuracy:.4f}")
        else:
            text = f"FAILED [{r.failure_class}] {(r.failure_message or '').strip().splitlines()[0][:100]}"
        self.say(f"trial {data['number']:>3}  {data['wall_s']:5.1f} s  {config:<40s} {text}")
        if self.progress is not None:
            self.progress.update(self.task, advance=1, best=f"best {report.fmt_rate(self.best)}" if self.best else "")

    def finish(self, tuner: Tuner, study: optuna.Study) -> int:
        self.quiet = False
        if self.progress is not None:
            self.progress.stop()
        wall = (self.ended or time.monotonic()) - self.started
        counts = report.counts(study)
        timing = {"wall_s": wall, "ray_startup_s": self.ray_startup, "trial_wall_s": self.trial_wall,
                  "trial_compute_s": self.trial_compute}
        if self.json_mode:
            print(json.dumps({"study": study.study_name, "storage": tuner.url, "stopped": tuner.stop_reason,
                              "counts": counts, "timing": timing, "front": report.front_rows(study)}, indent=2))
        else:
            self._print_summary(tuner, study, counts, timing)
        return 130 if tuner.stop_reason and tuner.stop_reason.startswith("interrupted") else 0

    def _print_summary(self, tuner: Tuner, study: optuna.Study, counts: dict[str, Any], timing: dict[str, float]) -> None:
        c = self.console
        c.print()
        if tuner.stop_reason:
            c.print(f"stopped: {tuner.stop_reason}", markup=False)
        if st.baseline_trial(study) is not None:
            c.print(report.front_table(study))
        by_class = ", ".join(f"{n} {k}" for k, n in sorted(counts["failed_by_class"].items()))
        c.print(f"trials: {counts['trials']} run, {counts['completed']} completed, {counts['failed']} failed"
                + (f" ({by_class})" if by_class else "") + f", {counts['infeasible']} infeasible"
                + (f"; {counts['duplicates']} duplicate proposals answered from earlier trials" if counts["duplicates"] else "")
                + (f"; {counts['skipped'] - counts['skipped_oom']} proposals skipped without running "
                   "(knob values that cannot be combined)" if counts["skipped"] - counts["skipped_oom"] else "")
                + (f"; {counts['skipped_oom']} skipped as known to run out of memory (trials saved)"
                   if counts["skipped_oom"] else ""),
                markup=False)
        for line in report.failures_text(study)[-5:]:
            c.print(f"  {line}", markup=False)
        overhead = timing["wall_s"] - timing["trial_compute_s"]
        c.print(f"time: {timing['wall_s']:.1f} s wall; trial compute (build, train, evaluate, time) "
                f"{timing['trial_compute_s']:.1f} s; ray start {timing['ray_startup_s']:.1f} s; other overhead "
                f"(preflight, worker spawn, imports, data loading, storage) {overhead - timing['ray_startup_s']:.1f} s",
                markup=False)
        storage_flag = "" if tuner.url == st.DEFAULT_STORAGE else f" --storage {tuner.url}"
        c.print(f"stored: study {study.study_name!r} in {tuner.url}", markup=False)
        c.print(f"next:   advisor export{storage_flag} --study {study.study_name} --pick balanced -o best.yaml", markup=False)
        c.print(f"        advisor tui{storage_flag} --study {study.study_name}   (the interactive explorer)", markup=False)
        o = tuner.o
        again = "".join([f" --workload {o.workload}" if o.workload != "train" else "",
                         f" --space {o.space}" if o.space else "", f" --study {o.study_name}" if o.study_name else "",
                         storage_flag])
        c.print(f"        advisor tune {o.workload_path}{again} --trials {o.trials + 20}   (resume: run 20 more)",
                markup=False)
