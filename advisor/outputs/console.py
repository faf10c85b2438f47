"""What ``advisor tune`` prints: the setup, a line per trial as it finishes, and the
final summary (the Pareto front against the baseline, counts, timing, next commands)."""

from __future__ import annotations

import shlex
import time
from typing import TYPE_CHECKING, Any

from advisor.core.caveats import legend, mark
from advisor.core.events import (
    Cancelled,
    Event,
    Finished,
    Note,
    Paired,
    Probed,
    Started,
    Stopped,
    TimeLimit,
    TimeoutSet,
)
from advisor.core.latency import CONSTRAINT as LATENCY_CONSTRAINT
from advisor.core.latency import Latency, fmt_ms, over_limit_text
from advisor.core.metric import DEFAULT_METRIC, MetricSpec
from advisor.core.objectives import METRIC_DROP, Versus
from advisor.core.pairs import DISTURBED_PAIRS_NOTE, SITTINGS_NOTE, resident_note
from advisor.core.results import TrialResult
from advisor.core.stored import (
    DISTURBED_BASELINE_NOTE,
    EARLY_STOP,
    TRAINING_SKIPPED,
    StoredStudy,
    TrialRecord,
    read_study,
)
from advisor.core.units import first_line, fmt_bytes, fmt_energy, fmt_rate, plural
from advisor.outputs.json_output import print_json
from advisor.outputs.summary import counts, dropped_lines, failures_text, front_rows, picks_line
from advisor.study.storage.stores import DEFAULT_STORAGE

if TYPE_CHECKING:
    from advisor.study.run.plan import StudyPlan
    from advisor.study.run.tuner import StudyOutcome


def trial_text(r: TrialResult, record: TrialRecord, vs: Versus | None, metric: MetricSpec = DEFAULT_METRIC) -> str:
    """A finished trial's figures in one line: measured, probed only, metric reused, or
    stopped early by the metric gate; the metric by its name (``metric``)."""
    ratios = ""
    if vs is not None and vs.throughput_ratio is not None:
        memory = f", {vs.memory_ratio:.2f}x its memory" if vs.memory_ratio is not None else ""
        ratios = f"  ({vs.throughput_ratio:.2f}x the baseline{memory}, unconfirmed)"
    energy = _energy(r)
    caveats = "".join(f"  [{c.text}]" for c in record.caveats)
    if record.state == "probed":
        return (f"probed: {r.throughput:,.0f} samples/s, {fmt_bytes(r.peak_memory_bytes)}{energy}{ratios}; "
                f"no training run needed: {record.get(TRAINING_SKIPPED)}{caveats}")
    latency = f", {record.latency.text()}" if record.latency is not None else ""  # an inference trial's
    text = (f"{r.throughput:,.0f} samples/s, {fmt_bytes(r.peak_memory_bytes)}{energy}, "
            f"{metric.name} {metric.value_text(r.score)}{latency}{ratios}")
    text += caveats  # a busy machine, or timing that did not settle (advisor.core.caveats)
    if (source := record.metric_source(metric.name)):
        text += f"  [{source}: same training numerics]"
    stop = record.get(EARLY_STOP)
    if stop:
        text += f"  stopped at {100 * stop['fraction']:.0f}% of the training budget: {stop['reason']}"
    elif record.state == "complete" and not record.feasible:
        text += "  " + infeasible_text(record.constraints, vs, metric, record.latency)
    return text


def _train_size(facts: dict[str, Any]) -> str:
    """The training set's size as the preflight found it; a stream has none."""
    return "streaming" if facts.get("train_size") is None else str(facts["train_size"])


def _energy(r: TrialResult) -> str:
    """', 12.3 mJ/sample' on a GPU whose energy counter was read; '' otherwise."""
    return f", {fmt_energy(r.energy_per_sample_j)}" if r.energy_per_sample_j is not None else ""


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
        self.total = 0
        self.study_line = ""  # the setup's last line, said when the study is open
        self.metric = DEFAULT_METRIC  # the study's metric, once planned
        self.started = time.monotonic()
        self.trial_wall = 0.0
        self.trial_compute = 0.0
        self.confirm_wall = 0.0
        self.ray_startup = 0.0
        self.best: float | None = None
        self.ended: float | None = None  # when a background study stopped (the explorer may stay open)
        self.limit: TimeLimit | None = None  # the study's --budget or --timeout: its lines show the time left
        self.clock = time.monotonic  # what the time left is read from (the TimeLimit's clock)

    def say(self, text: str) -> None:
        if self.quiet:
            return
        (self.progress.console if self.progress else self.console).print(text, markup=False)

    def planned(self, plan: StudyPlan) -> None:
        """The setup, before Ray starts."""
        f = plan.facts
        self.say(f"workload  {plan.workload.path}" + (
            f"  ({f['parameters']:,} parameters; {_train_size(f)} train / {f['val_size']} validation samples)"
            if "parameters" in f else "  (preflight skipped)"))
        for note in f.get("notes", []):
            self.say(f"          {note}")
        hw = plan.hardware
        self.say(f"hardware  {hw.cpu.model}, {hw.cpu.cores} cores" + (f"; {hw.gpu_names()}" if hw.gpus else "; no GPU"))
        for note in hw.notes:
            self.say(f"          {note}")
        self.say(f"space     {plan.space.name}: {plan.space.size()} configurations on this machine")
        for line in dropped_lines(plan.space):
            self.say(f"          {line}")
        # said once the study is open (``Started``): a study that cannot be resumed is refused
        # before a line says it runs
        self.study_line = (f"study     {plan.study_name} in {plan.storage_url} ({plural(plan.options.trials, 'trial')}, "
                           + (f"{plan.settings.train_samples} training samples each)"
                              if plan.options.workload == "train" else "inference: no training)"))
        self.total = plan.options.trials
        self.metric = plan.workload.metric_spec

    def event(self, event: Event) -> None:
        if isinstance(event, Started):
            if self.study_line:
                self.say(self.study_line)
                self.study_line = ""
            self.ray_startup = event.startup_s
            self.say(f"ray       started in {event.startup_s:.1f} s; {event.slots} trial(s) at a time, "
                     f"each with {event.resources}")
            self._start_progress()
        elif isinstance(event, Note):
            self.say(f"note      {event.text}")
        elif isinstance(event, TimeoutSet):
            self.say(f"timeout   {event.trial_timeout_s:.0f} s per trial")
        elif isinstance(event, TimeLimit):
            self.limit = event
            self.say(f"time      {event.text(self.clock(), with_flag=True)}; each line ends with the time left")
        elif isinstance(event, Probed):
            r, vs = event.result, event.versus
            ratios = (f"  ({vs.throughput_ratio:.2f}x the baseline, {vs.memory_ratio:.2f}x its memory, unconfirmed)"
                      if vs is not None and vs.throughput_ratio is not None and vs.memory_ratio is not None else "")
            self.say(f"probe {event.number:>3}  {event.wall_s:5.1f} s  {event.config.describe():<40s} "
                     f"{r.throughput:,.0f} samples/s, {fmt_bytes(r.peak_memory_bytes)}{_energy(r)}{ratios}"
                     + self._left())
        elif isinstance(event, Finished):
            self._finished(event)
        elif isinstance(event, Stopped):
            self.ended = time.monotonic()
        elif isinstance(event, Cancelled):
            self.say(f"trial {event.number:>3}  cancelled")
        elif isinstance(event, Paired):
            self.confirm_wall += event.wall_s
            c = event.confirmation
            thr, mem = c.throughput, c.memory
            figures = (f"throughput {thr.text()}, memory {mem.text()}" if thr is not None and mem is not None
                       else "no pair yet")
            state = {"running": "", "confirmed": "  [confirmed]", "capped": "  [pair cap reached]",
                     "wide": "  [sittings disagree: wider than the target]",
                     "settled": f"  [{c.note}]", "dominated": f"  [stopped: {c.note}]",
                     "failed": f"  [failed: {first_line(c.note, 120)}]"}
            self.say(f"confirm {c.trial:>3}  {event.wall_s:5.1f} s  {event.config.describe():<40s} {figures}"
                     f"{state.get(c.status, '')}{self._left()}")

    def _left(self) -> str:
        """'  [1 min 05 s elapsed, 28 min 55 s left]' once the study has a time limit, else ''."""
        return f"  [{self.limit.text(self.clock())}]" if self.limit is not None else ""

    def _start_progress(self) -> None:
        if self.json_mode or self.quiet or not self.console.is_terminal:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn("trials"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[best]}"), TimeRemainingColumn(), console=self.console)
        self.task = self.progress.add_task("trials", total=self.total, best="")
        self.progress.start()

    def _finished(self, event: Finished) -> None:
        r, record = event.result, event.record
        self.trial_wall += event.wall_s
        self.trial_compute += r.compute_s
        if r.ok:
            if self.best is None or r.throughput > self.best:  # type: ignore[operator]
                self.best = r.throughput
            self.say(f"trial {event.number:>3}  {event.wall_s:5.1f} s  {event.config.describe():<40s} "
                     f"{trial_text(r, record, event.versus, self.metric)}{self._left()}")
        else:
            what = "skipped" if r.skipped else "FAILED"  # skipped: refused by its own check before it ran
            self.say(f"trial {event.number:>3}  {event.wall_s:5.1f} s  {event.config.describe():<40s} "
                     f"{what} [{r.failure_class}] {first_line(r.failure_message, 100)}{self._left()}")
        if self.progress is not None:
            self.progress.update(self.task, advance=1, best=f"best {fmt_rate(self.best)}" if self.best else "")

    def finish(self, plan: StudyPlan, outcome: StudyOutcome) -> int:
        """The summary; returns the exit status (130 when the user interrupted the study)."""
        self.quiet = False
        if self.progress is not None:
            self.progress.stop()
        wall = (self.ended or time.monotonic()) - self.started
        study = read_study(outcome.study)
        tally = counts(study)
        timing = {"wall_s": wall, "ray_startup_s": self.ray_startup, "trial_wall_s": self.trial_wall,
                  "trial_compute_s": self.trial_compute, "confirm_s": self.confirm_wall}
        if self.json_mode:
            print_json("tune", {"study": study.name, "storage": plan.storage_url, "stopped": outcome.stop_reason,
                                "counts": tally, "timing": timing,
                                "front": [row.to_dict() for row in front_rows(study)]})
        else:
            self._print_summary(plan, outcome, study, tally, timing)
        return 130 if outcome.interrupted else 0

    def _print_summary(self, plan: StudyPlan, outcome: StudyOutcome, study: StoredStudy, tally: dict[str, Any],
                       timing: dict[str, float]) -> None:
        c = self.console
        c.print()
        if outcome.stop_reason:
            c.print(f"stopped: {outcome.stop_reason}", markup=False)
        if study.baseline is not None:
            c.print(front_table(study))
        by_class = ", ".join(f"{n} {k}" for k, n in sorted(tally["failed_by_class"].items()))
        not_combinable = (tally["skipped"] - tally["skipped_oom"] - tally["skipped_estimate"]
                          - tally["skipped_over_limit"] - tally.get("skipped_known_failure", 0))
        probed = f", {tally['probed_only']} probed only" if tally["probed_only"] else ""
        c.print(f"trials: {tally['trials']} run, {tally['completed']} completed{probed}, {tally['failed']} failed"
                + (f" ({by_class})" if by_class else "") + f", {tally['infeasible']} infeasible"
                + (f"; {tally['duplicates']} duplicate proposals answered from earlier trials"
                   if tally["duplicates"] else "")
                + (f"; {plural(not_combinable, 'proposal')} skipped without running "
                   "(knob values that cannot be combined)" if not_combinable else "")
                + (f"; {tally['skipped_oom']} skipped as known to run out of memory (trials saved)"
                   if tally["skipped_oom"] else "")
                + (f"; {tally['skipped_estimate']} not run: their memory, estimated first, was over the limit"
                   if tally["skipped_estimate"] else "")
                + (f"; {tally['skipped_over_limit']} skipped as known to be over the memory limit (trials saved)"
                   if tally["skipped_over_limit"] else "")
                + (f"; {tally['skipped_known_failure']} skipped as known to fail like earlier trials (trials saved)"
                   if tally.get("skipped_known_failure") else ""),
                markup=False)
        if tally["probes"]:
            c.print(f"two-stage: {tally['probes']} probes, {tally['training_runs']} training runs "
                    f"({tally['early_stops']} stopped early by the metric gate); "
                    f"{plural(tally['probed_only'], 'configuration')} needed no training run (dominated beyond noise "
                    "by a feasible one), "
                    f"{tally['metric_reused']} reused one (same training numerics)"
                    + (f"; {tally['trained_as_baseline']} of the training runs repeated the baseline's (same "
                       "training numerics: judged as the baseline)" if tally["trained_as_baseline"] else ""),
                    markup=False)
        for line in failures_text(study)[-5:]:
            c.print(f"  {line}", markup=False)
        overhead = timing["wall_s"] - timing["trial_compute_s"] - timing["confirm_s"] - timing["ray_startup_s"]
        c.print(f"time: {timing['wall_s']:.1f} s wall; trial compute (build, train, evaluate, time) "
                f"{timing['trial_compute_s']:.1f} s; paired confirmation {timing['confirm_s']:.1f} s; ray start "
                f"{timing['ray_startup_s']:.1f} s; other (preflight, seed replicas, baseline re-measurements, worker "
                f"spawn, imports, data loading, storage) {overhead:.1f} s", markup=False)
        url = plan.storage_url
        storage_flag = "" if url == DEFAULT_STORAGE else f" --storage {shlex.quote(url)}"  # lines to paste in a shell
        if (picks := picks_line(study)) is not None:  # what `advisor export --pick` writes (it says why a tie)
            c.print(f"picks:  {picks}", markup=False)
        c.print(f"stored: study {study.name!r} in {url}", markup=False)
        c.print(f"next:   advisor export{storage_flag} --study {study.name} --pick balanced -o best.yaml", markup=False)
        c.print(f"        advisor tui{storage_flag} --study {study.name}   (the interactive explorer)", markup=False)
        o = plan.options
        again = "".join([f" --study {o.study_name}" if o.study_name else "", storage_flag,
                         *(f" {shlex.quote(a)}" for a in o.resume_flags())])  # what resuming must be given again
        left = o.trials - tally["trials"]  # a study stopped short: resuming runs the rest
        if outcome.space_exhausted:  # resuming would find nothing more to run
            c.print("        (every configuration of the space was measured or ruled out: a larger --space gives "
                    "the search more to try)", markup=False)
            return
        more = f"--trials {o.trials}   (resume: run the {left} left)" if left > 0 else \
            f"--trials {o.trials + 20}   (resume: run 20 more)"
        c.print(f"        advisor tune {shlex.quote(o.workload_path)}{again} {more}", markup=False)


def infeasible_text(constraints: dict[str, float], vs: Versus | None, metric: MetricSpec = DEFAULT_METRIC,
                    latency: Latency | None = None) -> str:
    """Why a trial is infeasible, and whether its metric drop is beyond the metric's noise
    (the verdict, ``advisor.core.feasibility``: decided, or undecided within the noise);
    ``latency``: an inference trial's, for its p99 against --max-latency-ms."""
    why = []
    verdict = vs.verdict if vs is not None else None
    undecided = False
    if constraints.get(METRIC_DROP, 0) > 0 and verdict is not None and verdict.noise_known:
        undecided = not verdict.decided
        likely = "likely " if not verdict.decided else ""
        why.append(f"{metric.name} {likely}worse than --max-metric-drop allows ({verdict.text(metric.delta_text, metric.higher_is_better)})")
    elif constraints.get(METRIC_DROP, 0) > 0:
        text = f"{metric.name} worse than --max-metric-drop allows"
        if vs is not None and vs.metric_delta is not None and vs.epsilon > 0:
            noise = metric.noise_text(vs.epsilon)
            text += (f" ({metric.delta_text(vs.metric_delta)}; " + (
                f"within the metric's noise of {noise}: the limit is tighter than this study can resolve)"
                if vs.metric_within_noise else f"beyond the metric's noise of {noise})"))
        why.append(text)
    if constraints.get("memory_cap", 0) > 0:
        why.append("peak memory over --memory-cap")
    over = constraints.get(LATENCY_CONSTRAINT, 0)
    if over > 0:  # stored as p99 minus the limit
        why.append(over_limit_text(latency.p99_ms, latency.p99_ms - over, latency.busy) if latency is not None
                   else "p99 latency over --max-latency-ms")
    if undecided and len(why) == 1:  # the noise cannot tell yet: more seeds may put it on the front
        return "counted infeasible for now: " + why[0]
    return "infeasible: " + "; ".join(why) if why else "infeasible"


def front_table(study: StoredStudy) -> Any:
    """A rich Table of the Pareto front (baseline row first, marked)."""
    from rich.table import Table

    noise, metric = study.metric_noise, study.metric
    sittings = study.sittings
    reference = study.shown_baseline_reference  # a disturbed first run: the reference its ratios are to
    table = Table(title=f"Pareto front of {study.name} (feasible trials)", title_justify="left",
                  caption="· marks the baseline when it is not itself on the front. Ratios are to the baseline: "
                          "confirmed in pairs, as median (95% interval) over that many pairs run beside it after the "
                          "search (samples/s is the trial's own run in the search: divided by the baseline's it "
                          "need not give the confirmed ratio); unconfirmed: one "
                          "trial against the baseline as measured by then" + (
                              ". An interval holds for the minutes its pairs ran; on a shared machine the ratio can "
                              "move further between sittings (`advisor confirm` adds one and pools them)"
                              if len(sittings) == 1 else f". {SITTINGS_NOTE}" if len(sittings) > 1 else "") + (
                              f". {note}" if (note := resident_note(study.confirmations.values())) else "")
                          + (
                              f". Metric noise (seeds {noise.seeds}): {metric.noise_text(noise.epsilon)}"
                              if noise else "") + (
                              f". {DISTURBED_BASELINE_NOTE}" if reference else "") +
                          f". {metric.name}: {metric.direction_word}",
                  caption_justify="left")
    rows = front_rows(study)
    # a busy or unsettled timing marks its samples/s (the reference a disturbed baseline shows is a median)
    marks = {row.record.number: study.shown_caveats(row.record) for row in rows}
    if (said := legend(c.kind for found in marks.values() for c in found)):
        table.caption = f"{table.caption}. {said}"
    if any(row.versus.left_out or row.versus.all_disturbed for row in rows):
        table.caption = f"{table.caption}. {DISTURBED_PAIRS_NOTE}"
    latency = any(row.record.latency is not None for row in rows)  # an inference study's
    for name, justify in (("trial", "right"), ("configuration", "left"), ("samples/s", "right"),
                          ("vs base", "right"), ("peak memory", "right"), ("vs base", "right"), ("pairs", "right"),
                          (metric.name, "right"), (metric.delta_header, "right"),
                          *([("p50 / p99 latency", "right"), ("batch 1", "right")] if latency else [])):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        r, f, vs = row.record, row.figures, row.versus
        label = f"{r.number}{' (baseline)' if r.baseline else ''}{'' if row.on_front else ' ·'}"
        thr, mem, pairs = vs.cells()
        cells = [label, r.description, fmt_rate(study.shown_throughput(r)) + mark(marks[r.number]), thr,  # type: ignore[arg-type]
                 fmt_bytes(f.peak_memory_bytes),
                 mem, pairs,
                 metric.value_text(f.score), vs.metric_text(metric)]
        if latency:
            lat = r.latency
            cells += [f"{fmt_ms(lat.p50_ms)} / {fmt_ms(lat.p99_ms)}{lat.mark}" if lat is not None else "-",
                      fmt_ms(lat.batch1_ms) if lat is not None else "-"]
        table.add_row(*cells)
    return table
