"""An undecided front candidate trains with the baseline's other seeds, and the study then
reads it at its seed mean, judged again (advisor/study/confirmation/more_seeds.py). A real Optuna study
in SQLite written by the real ledger; the training runs come from a scripted executor
(named as such: the seeds' values are chosen so the verdict's change is known exactly; the
real executor runs this step in every training study test that measures the noise)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import optuna
import pytest

from advisor.core.config import TrialConfig
from advisor.core.events import Note
from advisor.core.feasibility import verdict
from advisor.core.results import TrialResult, TrialSettings
from advisor.core.stop import Stop
from advisor.core.stored import METRIC_NOISE, METRIC_SEEDS, read_study
from advisor.search.space import parse_space
from advisor.study.confirmation.more_seeds import train_more_seeds, undecided_candidates

from scripted import Handle, Workload, ledger_study

SPACE = parse_space({"batch_size": {"choices": [32, 64]}, "precision": {"choices": ["fp32", "bf16"]}}, "t", "t")
BASE = [0.950, 0.952, 0.948]  # the baseline's metric over seeds 0, 1, 2


@dataclass
class ScriptedSeeds:
    """An executor answering each training run at once with ``values[seed]``; ``asked``
    records (batch size, seed, part) per run."""

    values: dict[int, float]
    asked: list[tuple[int, int, str]] = field(default_factory=list)

    def submit(self, number, payload):
        self.asked.append((payload.config.batch_size, payload.settings.seed, payload.settings.part))
        score = self.values[payload.settings.seed]
        return Handle(number, time.monotonic(), TrialResult(ok=True, score=score, train_samples=100))

    def wait(self, handles, timeout):
        return [(h, h.result) for h in handles]

    def cancel(self, handle):
        pass


def full(throughput: float, score: float) -> TrialResult:
    return TrialResult(ok=True, throughput=throughput, peak_memory_bytes=100.0, score=score,
                       step_time_median_s=0.01)


@pytest.fixture
def study(tmp_path):
    study, ledger = ledger_study(tmp_path, SPACE, "m", sampler=optuna.samplers.RandomSampler(seed=0))
    base = ledger.propose_baseline()
    ledger.tell(base.number, full(1000.0, BASE[0]), 1.0)
    study.set_user_attr(METRIC_NOISE, {"seeds": [0, 1, 2], "values": BASE})
    bf16 = ledger._hand_out(study.ask(), TrialConfig(batch_size=32, precision="bf16"))
    ledger.tell(bf16.number, full(1500.0, 0.944), 1.0)  # 1.5x, -0.6 pt on one seed: undecided
    return study


def test_an_undecided_candidate_trains_with_the_baseline_seeds_and_is_judged_again(study):
    stored = read_study(study)
    bf16 = stored.records[1]
    assert stored.verdict(bf16).kind == "undecided" and bf16.figures.score == pytest.approx(0.944)
    executor, notes = ScriptedSeeds({1: 0.951, 2: 0.950}), []
    trained = train_more_seeds(study, Workload(), TrialSettings(train_samples=100, seed=0), executor, top=6,
                               timeout=60.0, stop=Stop(), on_event=notes.append, part="training")
    assert trained == 1 and executor.asked == [(32, 1, "training"), (32, 2, "training")]
    assert study.user_attrs[f"{METRIC_SEEDS}1"] == {"seeds": [0, 1, 2], "values": [0.944, 0.951, 0.950]}
    stored = read_study(study)
    bf16 = stored.records[1]
    assert bf16.figures.score == pytest.approx((0.944 + 0.951 + 0.950) / 3)  # read at its seed mean
    assert stored.verdict(bf16).kind == "feasible" and bf16.feasible
    texts = [n.text for n in notes if isinstance(n, Note)]
    assert texts[0].startswith("1 front candidate(s) undecided within the metric's noise")
    assert texts[-1].startswith("trial 1: accuracy over seeds [0, 1, 2]: ") and "feasible: " in texts[-1]
    assert undecided_candidates(study, 6, 0) == []  # done: a resumed study does not train it again


def test_a_drop_the_more_seeds_show_puts_the_trial_off_the_front(study):
    train_more_seeds(study, Workload(), TrialSettings(train_samples=100, seed=0), ScriptedSeeds({1: 0.925, 2: 0.926}),
                     top=6, timeout=60.0, stop=Stop(), on_event=lambda e: None, part="training")
    stored = read_study(study)
    bf16 = stored.records[1]
    values = [0.944, 0.925, 0.926]
    assert stored.verdict(bf16) == verdict(values, BASE, 0.01)  # -1.8 pt on the mean of three
    assert not bf16.feasible and bf16.number not in [r.number for r in stored.front()]
    assert stored.versus_baseline(bf16).metric_delta == pytest.approx(sum(values) / 3 - sum(BASE) / 3)


def test_decided_or_reused_candidates_need_no_more_seeds(study):
    assert [r.number for r, _ in undecided_candidates(study, 6, 0)] == [1]
    study.set_user_attr(METRIC_NOISE, {"seeds": [0, 1, 2], "values": [0.944, 0.9441, 0.9439]})  # quiet now
    assert undecided_candidates(study, 6, 0) == []  # decided with one seed
    study.set_user_attr(METRIC_NOISE, {"seeds": [0], "values": [0.95]})
    assert undecided_candidates(study, 6, 0) == []  # no noise estimate: nothing to decide with



def test_a_candidate_whose_metric_is_reused_gets_its_seeds_through_the_trial_that_measured_it(tmp_path):
    """bf16 with one thread reuses bf16's metric (the same numerics) and is the faster of the
    two: the candidate. Its seeds are bf16's: bf16's configuration trains with them, stored
    as bf16's, and both trials read them (a candidate reused from another was left
    undecided for good before)."""
    from advisor.study.run._ledger import Reused

    study, ledger = ledger_study(tmp_path, SPACE, "m", sampler=optuna.samplers.RandomSampler(seed=0))
    base = ledger.propose_baseline()
    ledger.tell(base.number, full(1000.0, BASE[0]), 1.0)
    study.set_user_attr(METRIC_NOISE, {"seeds": [0, 1, 2], "values": BASE})
    bf16 = ledger._hand_out(study.ask(), TrialConfig(batch_size=32, precision="bf16"))
    source = ledger.tell(bf16.number, full(1100.0, 0.944), 1.0)
    alone = ledger._hand_out(study.ask(), TrialConfig(batch_size=32, precision="bf16", threads=1))
    ledger.apply(Reused(alone.number, full(1500.0, None), 1.0, source, 0.0))
    assert [(r.number, seeds) for r, seeds in undecided_candidates(study, 6, 0)] == [(bf16.number, [1, 2])]
    executor, notes = ScriptedSeeds({1: 0.951, 2: 0.950}), []
    assert train_more_seeds(study, Workload(), TrialSettings(train_samples=100, seed=0), executor, top=6,
                            timeout=60.0, stop=Stop(), on_event=notes.append, part="training") == 1
    assert executor.asked == [(32, 1, "training"), (32, 2, "training")]  # bf16's configuration, once
    assert f"{METRIC_SEEDS}{bf16.number}" in study.user_attrs and f"{METRIC_SEEDS}{alone.number}" not in study.user_attrs
    stored = read_study(study)
    for number in (bf16.number, alone.number):
        record = next(r for r in stored.records if r.number == number)
        assert record.figures.score == pytest.approx((0.944 + 0.951 + 0.950) / 3)
        assert stored.verdict(record).kind == "feasible" and record.feasible
    assert [n.text for n in notes][-1].startswith(
        f"trial {bf16.number} (the metric of trial {alone.number} too): accuracy over seeds [0, 1, 2]: ")
    assert undecided_candidates(study, 6, 0) == []


def test_an_undecided_trial_beyond_the_allowed_drop_gets_the_seeds_that_may_clear_it(tmp_path):
    """Seen by a user: a trial whose one value was the baseline's own seed-0 value was off
    the front as "likely worse" than the baseline's seed mean, and never got the seeds that
    would decide it. It is a candidate for them, as one of the front it could join, and
    the seeds bring it back onto the front."""
    study, ledger = ledger_study(tmp_path, SPACE, "m")
    seeds = [0.944, 0.962, 0.958]  # seed 0 drew low
    ledger.tell(ledger.propose_baseline().number, full(1000.0, seeds[0]), 1.0)
    study.set_user_attr(METRIC_NOISE, {"seeds": [0, 1, 2], "values": seeds})
    bf16 = ledger._hand_out(study.ask(), TrialConfig(batch_size=32, precision="bf16"))
    ledger.tell(bf16.number, full(1500.0, seeds[0]), 1.0)  # 1.5x, and exactly the baseline's seed-0 value
    stored = read_study(study)
    record = stored.records[1]
    judged = stored.verdict(record)
    assert judged.kind == "undecided" and judged.difference < -0.01  # beyond the drop on its point estimate
    assert not record.feasible and 1 not in [r.number for r in stored.front()]
    assert [r.number for r, _ in undecided_candidates(study, 6, 0)] == [1]
    executor = ScriptedSeeds({1: 0.962, 2: 0.958})  # it reproduces the baseline's other seeds too
    train_more_seeds(study, Workload(), TrialSettings(train_samples=100, seed=0), executor, top=6, timeout=60.0,
                     stop=Stop(), on_event=lambda e: None, part="training")
    stored = read_study(study)
    judged = stored.verdict(stored.records[1])
    assert judged.difference == pytest.approx(0.0) and stored.records[1].feasible  # within the drop, as likely
    assert 1 in [r.number for r in stored.front()]


@dataclass
class ScriptedByConfig(ScriptedSeeds):
    """``values`` by (batch size, seed)."""

    def submit(self, number, payload):
        key = (payload.config.batch_size, payload.settings.seed)
        self.asked.append((*key, payload.settings.part))
        return Handle(number, time.monotonic(), TrialResult(ok=True, score=self.values[key], train_samples=100))


def test_a_candidate_that_another_kept_off_the_list_gets_its_seeds_once_that_one_is_decided(tmp_path):
    """A review's study ended with a trial 'counted infeasible for now' that another candidate
    had kept off the list (here: at most one candidate, top=1); run again, the identical
    finished command trained it and changed its stored verdict. Now it is trained in the
    same run, once the other is decided."""
    study, ledger = ledger_study(tmp_path, SPACE, "m")
    ledger.tell(ledger.propose_baseline().number, full(1000.0, BASE[0]), 1.0)
    study.set_user_attr(METRIC_NOISE, {"seeds": [0, 1, 2], "values": BASE})
    for config, throughput, score in ((TrialConfig(batch_size=32, precision="bf16"), 1500.0, 0.935),
                                      (TrialConfig(batch_size=64), 1400.0, 0.945)):
        ledger.tell(ledger._hand_out(study.ask(), config).number, full(throughput, score), 1.0)  # both undecided
    assert [r.number for r, _ in undecided_candidates(study, 1, 0)] == [1]  # the faster one only
    executor = ScriptedByConfig({(32, 1): 0.93, (32, 2): 0.928, (64, 1): 0.952, (64, 2): 0.948})
    notes = []
    train_more_seeds(study, Workload(), TrialSettings(train_samples=100, seed=0), executor, top=1, timeout=60.0,
                     stop=Stop(), on_event=notes.append, part="training")
    stored = read_study(study)
    assert stored.verdict(stored.records[1]).kind == "infeasible"  # trial 1, over three seeds: off the front
    assert [a[:2] for a in executor.asked] == [(32, 1), (32, 2), (64, 1), (64, 2)]  # then trial 2, at once
    assert f"{METRIC_SEEDS}2" in stored.attrs and stored.verdict(stored.records[2]).kind != "undecided"
    assert any("trial 2 is a front candidate now" in n.text for n in notes if isinstance(n, Note))
    assert undecided_candidates(study, 1, 0) == []  # the same command again: nothing left to train
