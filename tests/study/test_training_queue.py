"""Two-stage evaluation's decisions on a real Optuna study in a real SQLite file, with the
real Strategy: probe results are given (numbers chosen for the case), so each decision is
exact. The trial processes that produce such results are exercised by the study tests."""

from __future__ import annotations

import time

import optuna
import pytest

from advisor.core.config import TrialConfig
from advisor.core.events import Note
from advisor.core.objectives import Limits
from advisor.core.results import TrialResult, TrialSettings
from advisor.core.stored import read_study
from advisor.search.space import parse_space
from advisor.search.strategy import Strategy
from advisor.study.run._ledger import Ledger, ProbedOnly
from advisor.study.run._training_queue import TrainingQueue

SPACE = parse_space({"batch_size": {"choices": [16, 32, 64, 128]}, "threads": {"choices": [None, 1]}},
                    "test", "test")
FP = {"steps": 5, "losses": [2.3, 2.2, 2.0, 1.9, 1.8], "state": [["w", 0.5, 9.0, 100]]}


@pytest.fixture
def study(tmp_path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="q",
                               directions=["maximize", "minimize", "maximize"],
                               sampler=optuna.samplers.RandomSampler(seed=0))


def baseline_fell_to(study, throughput: float) -> None:
    """The baseline measured again twice, at ``throughput``, after the trials so far."""
    time.sleep(0.01)
    study.set_user_attr("baseline_measurements", [{"at": time.time(), "throughput": throughput,
                                                   "peak_memory_bytes": 100.0} for _ in range(2)])
    time.sleep(0.01)


def probe(throughput, memory, fingerprint=None):
    return TrialResult(ok=True, throughput=throughput, peak_memory_bytes=memory, step_time_median_s=0.01,
                       train_samples=320, telemetry={"fingerprint": fingerprint} if fingerprint else {})


def accuracy(value, stop=None):
    return TrialResult(ok=True, score=value, train_samples=1000, final_loss=0.5,
                       telemetry={"curve": [{"samples": 250, "loss": 1.0, "metric": 0.5}], "early_stop": stop,
                                  "initial_loss": 2.3})


class Run:
    """A strategy, its ledger and a queue on the study; ``probed(config)`` asks a trial with
    that config and stores its probe. The queue decides, the ledger stores (as
    ``advisor.study.run._parts.Parts`` does in a study)."""

    def __init__(self, study, limits=Limits(0.01)):
        self.notes: list[str] = []
        self.strategy = Strategy(SPACE, TrialConfig(batch_size=32), workload="train", sampler="random",
                                 budget=10, limits=limits)
        self.ledger = Ledger(study, self.strategy, limits,
                             on_event=lambda e: self.notes.append(e.text) if isinstance(e, Note) else None)
        self.queue = TrainingQueue(self.ledger, TrialSettings(train_samples=1000), limits)

    def baseline(self, thr=1000.0, mem=100.0, acc=0.9):
        p = self.ledger.propose_baseline()
        self._probe(p, probe(thr, mem, FP))
        assert self.queue.next_run(anyway=False).proposal is p  # the baseline runs, always, first
        self.queue.waiting[p.number].running = True
        return self.finished(p.number, accuracy(acc), 5.0)

    def probed(self, config, thr, mem, fingerprint=None):
        trial = self.ledger.study.ask()
        p = self.ledger._hand_out(trial, TrialConfig(**config))
        self._probe(p, probe(thr, mem, fingerprint))
        return p

    def _probe(self, p, result):
        w = self.queue.probed(p, result, 1.0)
        self.ledger.store_probe(p.number, result, 1.0, w.at)

    def settle(self):
        return [self.ledger.apply(decision) for decision in self.queue.settle()]

    def finished(self, number, result, wall_s):
        w = self.queue.pop(number)
        return self.ledger.store_training(number, w.probe, w.wall_s, result, wall_s)

    def cancel(self, number, reason):
        self.queue.pop(number)
        return self.ledger.cancel_training(number, reason)


def test_the_baseline_is_stored_with_both_parts(study):
    run = Run(study)
    record = run.baseline()
    assert record.state == "complete" and record.feasible and record.baseline
    assert record.figures.throughput == 1000.0 and record.figures.score == 0.9
    assert record.get("probe_done") and record.get("accuracy_run")["wall_s"] == 5.0 and record.get("wall_s") == 6.0
    assert record.get("curve")[0]["metric"] == 0.5 and record.get("initial_loss") == 2.3


def test_dominated_beyond_noise_is_stored_as_probed_with_the_reason(study):
    run = Run(study)
    run.baseline(1000.0, 100.0)
    slow_big = run.probed({"batch_size": 64, "threads": 1}, 500.0, 150.0)
    near = run.probed({"batch_size": 64}, 950.0, 105.0)  # worse, but within the default noise
    small = run.probed({"batch_size": 16}, 300.0, 40.0)  # slower but smaller: a trade-off
    done = run.settle()
    assert [r.number for r in done] == [slow_big.number]
    stored = read_study(study)
    rec = stored.records[slow_big.number]
    assert rec.state == "probed" and rec.counted and rec.figures is None
    assert rec.probe == (500.0, 150.0)
    assert rec.get("accuracy_skipped").startswith("dominated by trial 0 (2.00x its throughput, 0.67x its memory")
    assert study.trials[slow_big.number].state == optuna.trial.TrialState.PRUNED
    assert set(run.queue.waiting) == {near.number, small.number}
    assert run.ledger.counted == 2  # the baseline and the probed one count towards --trials
    assert slow_big.number not in [r.number for r in stored.front()]


def test_a_probe_disturbed_throughout_or_timed_on_a_busy_machine_is_never_ruled_out_on_its_speed(study):
    """Its speed (kept, the least disturbed of its runs; or every block losing ~half its time
    to other programs) reads too slow by an unknown amount: 2x slower and 1.5x bigger than the
    baseline, it still waits for its training run. Timed on a quiet machine, it is ruled out."""
    run = Run(study)
    run.baseline(1000.0, 100.0)
    busy = {"interference": {"blocks": 4, "clean": 4, "dropped": 0, "scores": [0.48, 0.5, 0.49, 0.51],
                             "self_contended": False}}
    for i, telemetry in enumerate(({"kept": "the least disturbed of 3 runs, every one disturbed (...)"}, busy)):
        p = run.ledger._hand_out(run.ledger.study.ask(), TrialConfig(batch_size=[64, 128][i], threads=1))
        result = probe(500.0, 150.0)
        result.telemetry.update(telemetry)
        run._probe(p, result)
    assert run.settle() == [] and len(run.queue.waiting) == 2
    quiet = run.probed({"batch_size": 16, "threads": 1}, 500.0, 150.0)
    assert [d.number for d in run.settle()] == [quiet.number]


def test_dominance_compares_ratios_to_the_baseline_as_it_stood_at_each_probe(study):
    """The baseline was probed on a fast machine (1,000/s) and measured again twice at 600/s
    once the machine slowed: a later probe's reference (the median of the three latest
    measurements by then) is 600/s, so a probe at 700/s and 1.5x the memory is 1.17x the
    baseline then, not 0.7x, and is not dominated; one at 250/s (0.42x) still is, by trial
    0, whose own 1,000/s was judged against the reference as it stood then (itself: 1.00x;
    a later measurement never moves a figure already shown)."""
    run = Run(study)
    run.baseline(1000.0, 100.0)
    baseline_fell_to(study, 600.0)
    kept = run.probed({"batch_size": 64}, 700.0, 150.0)  # raw: 1000 >= 700 x 1.3, dominated on raw figures
    slow = run.probed({"batch_size": 128}, 250.0, 150.0)
    done = run.settle()
    assert [r.number for r in done] == [slow.number] and set(run.queue.waiting) == {kept.number}
    assert done[0].get("accuracy_skipped").startswith("dominated by trial 0 (2.40x its throughput")


def test_one_bad_probe_of_the_baseline_never_becomes_the_reference(study):
    """Trial 0 at 1,000/s, re-measured at 730/s (a bad probe) and at 1,000/s: a probe taken
    after them is judged against the median of the three, 1,000/s; one taken between the
    bad one and the next against the median of the two by then (865/s), never 730/s."""
    run = Run(study)
    run.baseline(1000.0, 100.0)
    time.sleep(0.01)
    bad_at = time.time()
    time.sleep(0.01)
    study.set_user_attr("baseline_measurements", [{"at": bad_at, "throughput": 730.0, "peak_memory_bytes": 100.0},
                                                  {"at": time.time(), "throughput": 1000.0,
                                                   "peak_memory_bytes": 100.0}])
    stored = read_study(study)
    assert [m[1] for m in stored.baseline_measurements] == [1000.0, 730.0, 1000.0]
    assert stored.reference_at(bad_at) == 865.0 and stored.reference_at(None) == 1000.0
    p = run.probed({"batch_size": 64}, 1000.0, 100.0)
    assert read_study(study).versus_baseline(read_study(study).records[p.number]).throughput_ratio == 1.0


def test_next_run_prefers_the_front_of_what_waits_fastest_first(study):
    run = Run(study)
    run.baseline(1000.0, 100.0)
    fast = run.probed({"batch_size": 64}, 1500.0, 120.0)
    beaten = run.probed({"batch_size": 128}, 1100.0, 150.0)  # the fast one beats it: waits for its verdict
    small = run.probed({"batch_size": 16}, 600.0, 50.0)
    assert run.queue.next_run(anyway=False) is None  # the Tuner says when
    order = []
    for _ in range(3):
        w = run.queue.next_run(anyway=True)
        w.running = True
        order.append(w.proposal.number)
    assert order == [fast.number, small.number, beaten.number]


def test_a_slow_configuration_passed_over_patience_times_goes_next(study):
    """Faster probes keep arriving; the slow one (which may hold the best metric) is passed
    over PATIENCE times, then trains, before the next faster one."""
    from advisor.study.run._training_queue import PATIENCE

    run = Run(study)
    run.baseline(1000.0, 100.0)
    slow = run.probed({"batch_size": 16}, 500.0, 90.0)  # slower, a little smaller: on the front of the queue
    order = []
    for i in range(PATIENCE + 1):
        run.probed({"batch_size": 64, "threads": 1} if i == 0 else {"batch_size": [128, 64, 128][i - 1]},
                   1500.0 + 100 * i, 95.0)
        w = run.queue.next_run(anyway=True)
        run.queue.started(w)  # as the Tuner starts its training run
        order.append(w.proposal.number)
    assert slow.number not in order[:PATIENCE] and order[PATIENCE] == slow.number


def test_an_infeasible_front_leaves_the_others_to_run(study):
    run = Run(study)
    run.baseline(1000.0, 100.0, acc=0.9)
    fast = run.probed({"batch_size": 64}, 2000.0, 50.0)
    other = run.probed({"batch_size": 128}, 1500.0, 80.0)
    w = run.queue.next_run(anyway=True)
    assert w.proposal.number == fast.number
    w.running = True
    record = run.finished(fast.number, accuracy(0.5), 3.0)  # far below the baseline: infeasible
    assert not record.feasible
    assert run.settle() == []  # an infeasible trial dominates nothing
    assert run.queue.next_run(anyway=True).proposal.number == other.number


def test_a_gate_stop_is_stored_infeasible_with_where_it_stopped(study):
    run = Run(study)
    run.baseline(1000.0, 100.0, acc=0.9)
    p = run.probed({"batch_size": 128}, 3000.0, 90.0)
    run.queue.waiting[p.number].running = True
    stop = {"samples": 256, "fraction": 0.25, "reason": "behind the baseline beyond noise", "baseline_metric": 0.7}
    record = run.finished(p.number, accuracy(0.895, stop), 1.0)  # within the limit, but stopped
    assert record.state == "complete" and not record.feasible
    assert record.constraints["accuracy_drop"] > 0 and record.get("early_stop")["fraction"] == 0.25


def test_same_training_numerics_reuse_the_metric(study):
    study.set_user_attr("metric", {"name": "mse", "higher_is_better": False, "fraction": False})  # a regression
    run = Run(study)
    run.baseline(1000.0, 100.0, acc=0.9)
    same = run.probed({"batch_size": 32, "threads": 1}, 600.0, 100.0, FP)  # threads: may be neutral
    other = {**FP, "losses": [2.3, 2.2, 2.0, 1.9, 1.7]}
    differs = run.probed({"batch_size": 16, "threads": 1}, 700.0, 60.0, FP)  # batch size: never reused
    numerics = run.probed({"batch_size": 32, "threads": 1}, 500.0, 100.0, other)
    done = {r.number: r for r in run.settle()}
    assert same.number in done and differs.number not in done
    rec = done[same.number]
    assert rec.state == "complete" and rec.figures.score == 0.9 and rec.get("accuracy_reused_from") == 0
    assert rec.get("accuracy") == 0.9  # the baseline's run at the study's seed, as measured
    assert rec.get("accuracy_reuse_difference") == 0.0
    source = read_study(study).records[0]  # trained on the budget; the probe stepped as long as its timing took
    assert rec.get("train_samples") == source.get("train_samples") == 1000 and rec.get("final_loss") == 0.5
    assert any("mse reused from trial 0" in n for n in run.notes)  # the metric by its name, never "accuracy"
    assert numerics.number in run.queue.waiting  # its first steps differ: it trains


def test_a_training_run_that_repeats_the_baselines_is_judged_as_the_baseline(study):
    """A knob outside the reusable ones (gradient accumulation) that changes nothing on this
    model: its training run repeats the baseline's from start to end, so it has the
    baseline's numerics and its metric is the baseline's at every seed (feasible, though
    seed 0 was a low draw). A run that differs anywhere is one seed against the mean."""
    study.set_user_attr("accuracy_noise", {"seeds": [0, 1, 2], "values": [0.80, 0.97, 0.94], "sd": 0.09,
                                           "epsilon": 0.18})  # seed 0 (the baseline's run) a low draw
    run = Run(study)
    run.baseline(1000.0, 100.0, acc=0.80)
    same = run.probed({"batch_size": 32, "grad_accumulation": 2}, 900.0, 70.0)
    apart = run.probed({"batch_size": 32, "grad_accumulation": 4}, 800.0, 60.0)
    for p in (same, apart):
        run.queue.waiting[p.number].running = True
    mine = run.finished(same.number, accuracy(0.80), 1.0)
    drifted = accuracy(0.80)
    drifted.telemetry["curve"] = [{"samples": 250, "loss": 1.001, "metric": 0.5}]  # apart by 1e-3 at one point
    theirs = run.finished(apart.number, drifted, 1.0)
    assert mine.get("trained_as") == 0 and theirs.get("trained_as") is None
    assert mine.feasible  # as told: no difference from the baseline
    assert [n for n in run.notes if "repeated the baseline's" in n] == [
        f"trial {same.number}: its training run repeated the baseline's (the learning curve, the last loss and the "
        "accuracy within 0.0e+00, relative): the baseline's numerics, so its accuracy is judged as the baseline's "
        "over its seeds"]
    stored = read_study(study)
    records = {r.number: r for r in stored.records}
    judged = stored.verdict(records[same.number])
    assert judged.kind == "feasible" and judged.same_numerics and records[same.number].feasible
    assert stored.verdict(records[apart.number]).kind == "undecided" and not records[apart.number].feasible


def test_a_knob_found_neutral_on_the_model_lets_later_configurations_reuse_a_metric(study):
    """Gradient accumulation always trains at first (not a reusable knob); once a run with it
    repeated the baseline's, the study knows it leaves this model's numerics alone: a later
    configuration that differs from a trained one only in it reuses that one's metric when
    their first steps agree, and trains when they do not."""
    run = Run(study)
    run.baseline(1000.0, 100.0, acc=0.9)
    big = {**FP, "losses": [2.3, 2.1, 1.9, 1.7, 1.5]}  # batch size 64 steps otherwise
    first = run.probed({"batch_size": 64, "grad_accumulation": 2}, 1500.0, 150.0, big)
    assert run.settle() == []  # nothing learnt yet: it trains
    wide = run.probed({"batch_size": 64}, 1600.0, 160.0, big)
    assert run.settle() == []
    run.queue.waiting[wide.number].running = True
    run.finished(wide.number, TrialResult(ok=True, score=0.93, train_samples=1000, final_loss=0.4, telemetry={
        "curve": [{"samples": 256, "loss": 0.9, "metric": 0.6}], "initial_loss": 2.3}), 1.0)
    accumulated = run.probed({"batch_size": 32, "grad_accumulation": 2}, 800.0, 70.0, FP)
    assert run.settle() == []  # not yet known to be neutral
    run.queue.waiting[accumulated.number].running = True
    assert run.finished(accumulated.number, accuracy(0.9), 1.0).get("trained_as") == 0  # now it is
    assert read_study(study).neutral_knobs == {"grad_accumulation"}
    [reused] = run.settle()  # the first one, still waiting: bs=64 with accumulation, as bs=64 stepped
    assert reused.number == first.number and reused.get("accuracy_reused_from") == wide.number
    assert reused.figures.score == 0.93
    differs = run.probed({"batch_size": 64, "grad_accumulation": 4}, 1400.0, 140.0,
                         {**big, "losses": [2.3, 2.1, 1.9, 1.7, 1.6]})
    assert run.settle() == [] and differs.number in run.queue.waiting  # its first steps differ: it trains


def test_a_reused_metric_is_stored_as_the_sources_run_at_the_studys_seed(study):
    """The study reads the baseline at its seed mean; a trial reusing its metric stores the
    baseline's run at the study's seed (what `advisor measure` runs again), not that mean (a
    review's export said 0.6499, the mean, beside a run of 0.6196)."""
    study.set_user_attr("accuracy_noise", {"seeds": [0, 1, 2], "values": [0.9, 0.95, 0.97]})
    run = Run(study)
    run.baseline(1000.0, 100.0, acc=0.9)
    same = run.probed({"batch_size": 32, "threads": 1}, 600.0, 100.0, FP)
    [rec] = run.settle()
    assert rec.number == same.number and rec.get("accuracy") == 0.9 and rec.figures.score == 0.9
    stored = read_study(study)
    reread = next(r for r in stored.records if r.number == same.number)
    assert reread.figures.score == pytest.approx(0.94)  # read, as the baseline, at the seeds' mean


def test_over_the_memory_cap_needs_no_training_run(study):
    run = Run(study, Limits(0.01, memory_cap=120.0))
    run.baseline(1000.0, 100.0)
    big = run.probed({"batch_size": 128}, 300.0, 130.0)
    [record] = run.settle()
    assert record.number == big.number and "over the memory cap" in record.get("accuracy_skipped")


def test_cancelled_keeps_the_probe_and_does_not_count(study):
    run = Run(study)
    run.baseline()
    p = run.probed({"batch_size": 64}, 900.0, 90.0)
    record = run.cancel(p.number, "interrupted by SIGINT")
    assert record.state == "failed" and not record.counted and record.get("throughput") == 900.0
    assert "before its training run" in record.failure_message


def test_a_probed_only_trial_cannot_be_exported(study):
    from advisor.core.errors import StudyError
    from advisor.outputs.export import trial_by_number

    study.set_user_attr("metric", {"name": "val_loss", "higher_is_better": False, "fraction": False})
    run = Run(study)
    run.baseline(1000.0, 100.0)
    slow_big = run.probed({"batch_size": 64, "threads": 1}, 500.0, 150.0)
    run.settle()
    with pytest.raises(StudyError, match="was probed only .*no training run was needed.* its val_loss is unknown"):
        trial_by_number(read_study(study), slow_big.number)


def test_combinations_read_each_trial_against_the_baseline_measured_nearest_it(study):
    """The one-knob changes that paid off are judged on ratios to the baseline measured
    nearest each trial: measured at 700/s after the baseline fell from 1,000 to 600/s (twice,
    so the median of the three nearest is 600/s), a batch of 64 at 900/s is 1.5x faster (a
    move to combine, beyond even the 30% margin such a drifting baseline gives), not 0.9x."""
    run = Run(study)
    run.baseline(1000.0, 100.0, acc=0.9)
    baseline_fell_to(study, 600.0)
    for config, thr, memory in (({"batch_size": 64}, 900.0, 100.0), ({"threads": 1}, 600.0, 70.0)):  # faster; smaller
        p = run.probed({"batch_size": 32, **config}, thr, memory)
        run.queue.waiting[p.number].running = True
        assert run.finished(p.number, accuracy(0.9), 1.0).feasible
    chosen = run.strategy._combinations(run.ledger.baseline_record, run.ledger.stored())
    assert [(c.batch_size, c.threads) for c in chosen] == [(64, 1)]


def test_the_queue_decides_and_only_the_ledger_stores(study):
    """settle() takes its decisions out of the queue and writes nothing: the trial stays
    RUNNING until the ledger applies the decision."""
    run = Run(study)
    run.baseline(1000.0, 100.0)
    slow_big = run.probed({"batch_size": 64, "threads": 1}, 500.0, 150.0)
    [decision] = run.queue.settle()
    assert isinstance(decision, ProbedOnly) and decision.number == slow_big.number
    assert slow_big.number not in run.queue.waiting
    assert study.trials[slow_big.number].state == optuna.trial.TrialState.RUNNING
    assert run.ledger.apply(decision).state == "probed"
    assert study.trials[slow_big.number].state == optuna.trial.TrialState.PRUNED


def test_a_probed_only_seed_still_combines(study):
    """A seed that another seed dominated needed no training run (its metric is unknown), but
    its move still counts: two memory savers, one dominated by the other (a loaded machine's
    timings can make it so), are combined, as they are when both trained."""
    run = Run(study)
    run.baseline(1000.0, 100.0, acc=0.9)
    smaller = run.probed({"batch_size": 16}, 1100.0, 60.0)  # smaller and faster: trains
    assert run.settle() == []
    run.queue.waiting[smaller.number].running = True
    assert run.finished(smaller.number, accuracy(0.9), 1.0).feasible
    fewer = run.probed({"batch_size": 32, "threads": 1}, 500.0, 75.0)  # smaller, but dominated by the one above
    assert [r.number for r in run.settle()] == [fewer.number]
    stored = run.ledger.stored()
    assert stored.records[fewer.number].state == "probed" and stored.records[fewer.number].figures is None
    chosen = run.strategy._combinations(run.ledger.baseline_record, stored)
    assert [(c.batch_size, c.threads) for c in chosen] == [(16, 1)]
