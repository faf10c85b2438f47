"""A study's trial parts from submission to storage (the Tuner decides what starts when).

A configuration runs as one ``full`` part, or, with two-stage evaluation, as a ``probe`` and
later, where ``TrainingQueue`` decides it can change the front, a ``training`` part.
``Parts`` submits them to the ``Slots`` (with the study's interference limit, by which the
trial's timer drops disturbed blocks), and for each that comes back either runs it again
(too few clean blocks remain: ``BaselineWatch``; when its retries are used up, the
cleanest of its runs is kept), stores a good probe and
hands it to the queue, or stores the trial (``Ledger.tell`` / ``Ledger.store_training``)
and emits ``Finished``; what the queue decides needs no run is stored the same way.
``done`` counts the trials stored that count towards ``--trials``. When the study stops,
``cancel_all`` records what still runs or waits, so storage keeps no RUNNING trial.
"""

from __future__ import annotations

from dataclasses import replace

from advisor.core.events import Cancelled, Finished, Listener, Note, Probed, Submitted
from advisor.core.noise import reading_of
from advisor.core.objectives import Versus
from advisor.core.results import TrialPayload, TrialResult
from advisor.core.stored import WALL, TrialRecord, figure_time
from advisor.machine.memory import device_memory
from advisor.search.strategy import Proposal
from advisor.study.confirmation.baseline_watch import BaselineWatch
from advisor.study.confirmation.pairing import probe_settings
from advisor.study.run._ledger import Ledger
from advisor.study.run._slots import Done, Slots
from advisor.study.run._training_queue import TrainingQueue, Waiting, probe_result
from advisor.study.run.plan import StudyPlan


class Parts:
    """Args:
        plan: the study's plan (workload, settings); ledger: the study's writer.
        slots: what runs now; queue: two-stage evaluation's queue (None: full trials).
        on_event: receives ``Submitted``, ``Probed``, ``Finished``, ``Cancelled`` and notes.
        watch: the baseline's watch; None while the baseline itself runs (its parts get no
            interference limit, none runs again, and no result is shown against a
            baseline). The search's parts are ``watched(watch)`` once the baseline is in.
    Holds no state of its own (the ledger, the slots and the queue do), apart from the
    hosts whose trials it has said run at a low CPU priority (shared with ``watched``)."""

    def __init__(self, plan: StudyPlan, ledger: Ledger, slots: Slots, queue: TrainingQueue | None,
                 on_event: Listener, watch: BaselineWatch | None = None, noted: set[str] | None = None) -> None:
        self.plan, self.ledger, self.slots, self.queue, self.emit = plan, ledger, slots, queue, on_event
        self.watch = watch
        self._niced_hosts = noted if noted is not None else set()

    def watched(self, watch: BaselineWatch) -> Parts:
        """The same parts (ledger, slots, queue), judged and shown by ``watch``."""
        return Parts(self.plan, self.ledger, self.slots, self.queue, self.emit, watch, self._niced_hosts)

    @property
    def done(self) -> int:
        """Trials stored that count towards the budget (by this driver and any other)."""
        return self.ledger.counted

    def in_flight(self) -> int:
        """Configurations started and not yet stored: running, or probed and waiting, here
        or (as far as ``Ledger.observe`` last saw) on another driver."""
        return len(self._here() | set(self.ledger.others_running))

    def in_flight_here(self) -> int:
        """Configurations this driver started and has not stored yet."""
        return len(self._here())

    def _here(self) -> set[int]:
        return set(self.slots.running) | set(self.queue.waiting if self.queue is not None else ())

    # ---- submitting -------------------------------------------------------------------
    def submit(self, proposal: Proposal) -> None:
        """A new configuration's first part (its probe), or its only one."""
        settings = probe_settings(self.plan.settings) if self.queue is not None else self.plan.settings
        # its memory estimated first where it is at stake; a candidate over --memory-cap is not run
        # (the baseline is the reference whatever its memory: over the cap, it is only infeasible)
        cap = None if proposal.baseline else self.plan.options.memory_cap
        payload = TrialPayload.of(self.plan.workload, proposal.config, settings, estimate=self._at_stake(proposal, cap),
                                  memory_cap=cap, interference_limit=self._limit(), timing_tolerance=self._tolerance())
        self.slots.submit(proposal, payload, "probe" if self.queue is not None else "full")
        self.emit(Submitted(proposal.number, proposal.config))

    def submit_training(self, w: Waiting) -> None:
        assert self.queue is not None
        self.queue.started(w)
        self.slots.submit(w.proposal, self.queue.payload(w, self.plan.workload), "training")

    def settle(self) -> None:
        """Store the probed configurations that need no training run, or reuse one."""
        assert self.queue is not None
        for decision in self.queue.settle():
            record = self.ledger.apply(decision)
            shown = probe_result(record)
            self.emit(Finished(record.number, record.config, shown, record.get(WALL, 0.0), record,  # type: ignore[arg-type]
                               self.versus(shown, figure_time(record))))

    def fits_the_budget(self, proposal: Proposal) -> bool:
        """Whether ``proposal``, now numbered, is within ``--trials``: the trials stored that
        count, this driver's others in flight and other drivers' trials started before it
        (lower numbers) leave room. Two drivers taking the last trial at once: the lower
        number runs, the other is stored as cancelled (not counted)."""
        self.ledger.observe()
        mine = self.in_flight_here()
        before = sum(1 for n in self.ledger.others_running if n < proposal.number)
        if self.done + mine + before < self.plan.options.trials:
            return True
        self.ledger.tell(proposal.number, TrialResult.failed(
            "cancelled", "cancelled: other drivers on the study took its last trials"), 0.0)
        return False

    # ---- what came back ---------------------------------------------------------------
    def collect(self, timeout: float) -> list[TrialRecord]:
        """Wait briefly for results; store finished and timed-out trials (a probe that went
        well waits in the queue for the decision on its training run)."""
        finished = []
        for came in self.slots.done(timeout):
            self._note_priority(came)
            d = self._run_again(came)
            if d is None:
                continue
            if d.part == "probe" and d.result.ok:
                assert self.queue is not None
                w = self.queue.probed(d.proposal, d.result, d.wall_s)
                self.ledger.store_probe(d.number, d.result, d.wall_s, w.at)
                self.emit(Probed(d.number, d.proposal.config, d.result, d.wall_s,
                                 self.versus(d.result, w.at, probe=True)))  # w.at: its stored probed_at
                continue
            finished.append(self._record(d))
        return finished

    def _note_priority(self, d: Done) -> None:
        """Say once per host when its trials ran below the usual CPU priority (a Ray node
        started without RAY_worker_niceness=0 where the trial may not lower its niceness)."""
        nice, host = d.result.telemetry.get("niceness"), d.result.host or "this machine"
        if isinstance(nice, int) and nice > 0 and host not in self._niced_hosts:
            self._niced_hosts.add(host)
            self.emit(Note(f"trial {d.number} ran at niceness {nice} on {host} (Ray's worker_niceness): any other "
                           "program there gets the CPU first and its timings suffer; start that node's Ray with "
                           "RAY_worker_niceness=0 (docs/storage.md)"))

    def versus(self, result: TrialResult, when: float | None, probe: bool = False) -> Versus | None:
        """A result measured at ``when`` against the baseline, as the stored study will read
        it (None before the baseline is in)."""
        base = self.ledger.baseline_record
        if self.watch is None or base is None or base.figures is None:
            return None
        return self.watch.versus(result, base, self.plan.options.limits, when, probe)

    def _limit(self) -> float | None:
        return self.watch.limit if self.watch is not None else None

    def _at_stake(self, proposal: Proposal, cap: int | None) -> bool:
        """Whether the configuration might not fit (``advisor.core.memory_stake``): its memory
        plan is made only then."""
        config, device, gpus = proposal.config, self.plan.settings.device, self.plan.hardware.gpus
        memory = min(g.memory_bytes for g in gpus) if device == "cuda" and gpus else device_memory(device)
        limits = [x for x in (cap, memory) if x]
        ranks = config.devices if device == "cpu" and config.parallelism != "single" else 1
        return self.ledger.peaks.at_stake(config.batch_size, min(limits) if limits else None, ranks)

    def _tolerance(self) -> float | None:
        return self.watch.timing_tolerance if self.watch is not None else None

    def _run_again(self, d: Done) -> Done | None:
        """When too few of the trial's timed blocks were clean (``BaselineWatch.disturbed``):
        keep that measurement with the trial and run the same part again (it counts once;
        None). Otherwise what to store: ``d``, or, once the retries are used up, ``d`` with
        the cleanest of its runs. Training runs only inform the sentinel's judge: the
        metric does not depend on the speed."""
        if self.watch is None:
            return d
        if d.part == "training":
            self.watch.judge.add(reading_of(d.result.telemetry))
            return d
        why, kept = self.watch.disturbed(d.number, d.result)
        if why is None:
            if kept is not d.result:  # every run was disturbed: the last one is kept with the trial too
                self.ledger.note_disturbed(d.number, d.result, kept.telemetry.get("kept", ""))
            if "kept" in kept.telemetry:
                self.emit(Note(f"trial {d.number}: kept {kept.telemetry['kept']}"))
            return replace(d, result=kept)
        self.ledger.note_disturbed(d.number, d.result, why)
        self.emit(Note(f"trial {d.number}: {why}; running it again"))
        settings = probe_settings(self.plan.settings) if d.part == "probe" else self.plan.settings
        self.slots.submit(d.proposal, TrialPayload.of(self.plan.workload, d.proposal.config, settings,
                                                      interference_limit=self._limit(),
                                                      timing_tolerance=self._tolerance()), d.part)
        return None

    def _record(self, d: Done) -> TrialRecord:
        result, wall = d.result, d.wall_s
        if d.part == "training":
            assert self.queue is not None
            shown = self.queue.merged(d.number, result)
            w = self.queue.pop(d.number)
            record = self.ledger.store_training(d.number, w.probe, w.wall_s, result, wall)
            result, wall = shown, record.get(WALL, wall)
        else:
            record = self.ledger.tell(d.number, result, wall)
        self.emit(Finished(d.number, d.proposal.config, result, wall, record, self.versus(result, figure_time(record))))
        return record

    # ---- stopping ---------------------------------------------------------------------
    def cancel_all(self, reason: str, pending: Proposal | None = None) -> None:
        """Cancel what still runs (and ``pending``, a proposal still waiting for GPUs, and
        probed ones waiting for their training run) and record it."""
        for d in self.slots.cancel_all():
            if d.part == "training":
                self.queue.pop(d.number)  # type: ignore[union-attr]
                self.ledger.cancel_training(d.number, reason)
            else:
                self.ledger.tell(d.number, TrialResult.failed("cancelled", f"cancelled: {reason}"), d.wall_s)
            self.emit(Cancelled(d.number))
        for number in list(self.queue.waiting if self.queue is not None else ()):
            self.queue.pop(number)  # type: ignore[union-attr]
            self.ledger.cancel_training(number, reason)
            self.emit(Cancelled(number))
        if pending is not None:
            self.ledger.tell(pending.number, TrialResult.failed("cancelled", f"cancelled: {reason}"), 0.0)
            self.emit(Cancelled(pending.number))
