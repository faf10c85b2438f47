"""The picks decide on ratios to the baseline, the confirmed ones where a trial was
confirmed in pairs; the front uses the metric's noise as epsilon."""

from __future__ import annotations

from advisor.core.config import TrialConfig
from advisor.core.objectives import Figures
from advisor.core.pairs import Confirmation, Pair
from advisor.core.picks import pick
from advisor.core.stored import ACCURACY_NOISE, BASELINE_MEASUREMENTS, CONFIRMATION, StoredStudy, TrialRecord


def record(number: int, thr: float, mem: float, acc: float, at: float, **config) -> TrialRecord:
    return TrialRecord(number, "complete", TrialConfig.from_dict({"batch_size": 32, **config}),
                       Figures(thr, mem, acc), {"accuracy_drop": -0.01}, baseline=number == 0, finished_at=at)


def confirmation(trial: int, ratio: float) -> dict:
    pairs = [Pair(0.5, 1000.0, 1000.0 * r, 100.0, 100.0) for r in (ratio * 0.99, ratio, ratio * 1.01)]
    return Confirmation(trial, pairs, "confirmed").to_dict()


def test_fastest_follows_the_confirmed_ratio_not_the_single_trial():
    records = [record(0, 1000, 100, 0.95, 0.0), record(1, 2600, 100, 0.95, 10.0, precision="bf16"),
               record(2, 2000, 100, 0.95, 20.0, channels_last=True)]
    unconfirmed = StoredStudy("s", {}, records)
    assert pick(unconfirmed, "fastest").number == 1  # 2.6x on one trial
    confirmed = StoredStudy("s", {f"{CONFIRMATION}1": confirmation(1, 1.4), f"{CONFIRMATION}2": confirmation(2, 1.8)},
                            records)
    assert pick(confirmed, "fastest").number == 2  # in pairs: 1.4x against 1.8x
    vs = confirmed.versus_baseline(records[2])
    assert vs.confirmed and vs.pairs == 3 and 1.75 < vs.throughput_ratio < 1.85
    assert vs.throughput_text().startswith("1.80x (") and vs.throughput_text().endswith("3 pairs")
    assert unconfirmed.versus_baseline(records[2]).throughput_text() == "2.00x unconfirmed"


def test_unconfirmed_ratios_use_the_baseline_measured_nearest_in_time():
    records = [record(0, 1000, 100, 0.95, 0.0), record(1, 3000, 100, 0.95, 10.0, precision="bf16"),
               record(2, 3000, 100, 0.95, 100.0, channels_last=True)]
    study = StoredStudy("s", {BASELINE_MEASUREMENTS: [{"at": 90.0, "throughput": 2000.0}]}, records)
    assert study.versus_baseline(records[1]).throughput_ratio == 3.0  # trial 0 is nearer
    assert study.versus_baseline(records[2]).throughput_ratio == 1.5  # the re-measurement is nearer


def test_the_front_does_not_keep_a_slow_trial_for_accuracy_within_noise():
    records = [record(0, 1000, 100, 0.950, 0.0), record(1, 310, 100, 0.964, 10.0, parallelism="fsdp", devices=2)]
    assert [r.number for r in StoredStudy("s", {}, records).front()] == [0, 1]
    noisy = {ACCURACY_NOISE: {"seeds": [0, 1, 2], "values": [0.95, 0.94, 0.96]}}  # epsilon 0.02
    study = StoredStudy("s", noisy, records)
    assert [r.number for r in study.front()] == [0]
    # +1.4 pt against the seeds' mean 0.95: one seed cannot show it is no more than 1 pt worse
    vs = study.versus_baseline(records[1])
    assert vs.accuracy_text() == "+1.4 pt, undecided" and vs.verdict.kind == "undecided"
    assert vs.to_dict()["metric_verdict"] == "undecided"
